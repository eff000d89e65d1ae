use clap::Parser;

// mimalloc: measurably cheaper than glibc malloc for Pingora's many small
// per-request allocations (see docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let cli = fairgate::cli::Cli::parse();
    // Before any TLS config is built (listeners, Redis, the Kubernetes client).
    fairgate::tls::install_provider();
    if !matches!(
        cli.command,
        fairgate::cli::Command::Serve { .. } | fairgate::cli::Command::Demo
    ) {
        // `fairgate check ... | head` should end quietly when the pipe closes,
        // as other Unix tools do; servers keep Rust's SIGPIPE-ignoring default.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    std::process::exit(fairgate::cli::main(cli));
}
