//! `awsmp-loadtest`: drive the whole system at volume and check conservation.
fn main() -> anyhow::Result<()> {
    awsmp_loadtest::cli::main()
}
