fn main() -> std::process::ExitCode {
    accel::tools::main::<accel::cli::env::EnvCli>("accel-env", accel::tools::env::run)
}
