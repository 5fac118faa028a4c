fn main() {
    eprintln!("slurm-connector: `serve` is not there yet");
    std::process::exit(2);
}
