fn main() {
    eprintln!("mock-slurmrestd: not built yet");
    std::process::exit(2);
}
