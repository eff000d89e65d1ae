use clap::Parser;

fn main() {
    let cli = fairgate::cli::Cli::parse();
    std::process::exit(fairgate::cli::main(cli));
}
