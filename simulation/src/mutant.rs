//! Choosing the active mutant (`aws/src/mutants.rs`) from the command line.

use awsmp_aws::mutants::Mutant;

/// Make the mutant named `name` active for this process.
pub fn activate(name: &str) -> Result<Mutant, String> {
    let mutant = Mutant::from_name(name)
        .ok_or_else(|| format!("no mutant named {name:?} (see --list-mutants)"))?;
    set(Some(mutant))?;
    Ok(mutant)
}

/// Make `mutant` active (`None`: the real code).
#[cfg(feature = "mutants")]
pub fn set(mutant: Option<Mutant>) -> Result<(), String> {
    awsmp_aws::mutants::set(mutant);
    Ok(())
}

/// Without the `mutants` feature no mutant can be made active.
#[cfg(not(feature = "mutants"))]
pub fn set(mutant: Option<Mutant>) -> Result<(), String> {
    match mutant {
        None => Ok(()),
        Some(m) => Err(format!(
            "mutant {} needs a build with `--features mutants`",
            m.name()
        )),
    }
}
