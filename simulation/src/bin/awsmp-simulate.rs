//! `awsmp-simulate`: run the deterministic simulation sweep (docs/simulation.md).
fn main() -> std::process::ExitCode {
    awsmp_simulation::cli::main()
}
