fn main() {
    compile_protos();
}

/// Compiles the flyteidl2 connector subset in `proto/` (server and client stubs) into one
/// include file, `flyteidl2.rs`, that `src/proto.rs` pulls in with its nested package modules.
fn compile_protos() {
    // protoc comes from a crate so a build never depends on a system protoc being installed.
    // SAFETY: build scripts are single-threaded; nothing else reads the environment concurrently.
    unsafe {
        std::env::set_var(
            "PROTOC",
            protoc_bin_vendored::protoc_bin_path().expect("vendored protoc for this platform"),
        )
    };
    let includes = [
        std::path::PathBuf::from("proto"),
        protoc_bin_vendored::include_path().expect("vendored protoc include path"),
    ];
    let protos = [
        std::path::PathBuf::from("proto/flyteidl2/connector/service.proto"),
        std::path::PathBuf::from("proto/flyteidl2/connector/connector.proto"),
    ];
    println!("cargo:rerun-if-changed=proto");
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .include_file("flyteidl2.rs")
        .compile_protos(&protos, &includes)
        .expect("compiling proto/ (see the protoc message above)");
}
