//! The simulated buyers and what they meter: license `i` belongs to one buyer account and
//! meters the schedule's first dimensions ([`crate::Setup::dimensions`]: two, or more in the
//! scale class).

/// The buyer account of license `i`.
pub fn account(i: usize) -> String {
    format!("{:012}", 111_122_220_000u64 + i as u64)
}

/// License `i`'s ARN.
pub fn license(i: usize) -> String {
    format!(
        "arn:aws:license-manager::{}:license:l-{:032x}",
        account(i),
        i + 1
    )
}

/// The dimensions every license meters.
pub const DIMENSIONS: [&str; 2] = ["requests", "storage_gb"];

/// Every dimension a schedule may meter: [`DIMENSIONS`] first, then the scale class's.
pub const ALL_DIMENSIONS: [&str; 5] = ["requests", "storage_gb", "users", "seats", "events"];

/// Dimension `d` (`0..`[`ALL_DIMENSIONS`]`.len()`).
pub fn dimension(d: usize) -> &'static str {
    ALL_DIMENSIONS[d]
}
