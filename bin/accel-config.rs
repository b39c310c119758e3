fn main() -> std::process::ExitCode {
    accel::tools::main::<accel::cli::config::ConfigCli>("accel-config", accel::tools::config::run)
}
