//! Build-time code generation of the protocols Flyte's backend speaks to a connector: the
//! flyteidl2 connector subset and Flyte 1's agent protocol, from the workspace's `proto/`,
//! compiled by tonic/prost. A crate of its own, so a change elsewhere in the workspace (or a new
//! commit, which the main crate's build.rs watches for `--version`) never recompiles them.

fn main() {
    compile_protos();
}

/// Compiles the flyteidl2 connector subset and Flyte 1's agent protocol in `proto/` (server and
/// client stubs) into one include file, `flyteidl2.rs`, that `src/lib.rs` pulls in with its
/// nested package modules (`flyteidl2::…` and `flyteidl::…`).
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
        std::path::PathBuf::from("../../proto"),
        protoc_bin_vendored::include_path().expect("vendored protoc include path"),
    ];
    let protos = [
        std::path::PathBuf::from("../../proto/flyteidl2/connector/service.proto"),
        std::path::PathBuf::from("../../proto/flyteidl2/connector/connector.proto"),
        // Flyte 1's agent protocol (flyteidl 1.16), served beside Flyte 2's (`service/flyte1/`).
        std::path::PathBuf::from("../../proto/flyteidl/service/agent.proto"),
    ];
    println!("cargo:rerun-if-changed=../../proto");
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .include_file("flyteidl2.rs")
        // Kept for protobuf-JSON requests (`render`/`submit --request x.json`, via prost-reflect).
        .file_descriptor_set_path(
            std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap())
                .join("flyteidl2_descriptor.bin"),
        )
        .compile_protos(&protos, &includes)
        .expect("compiling proto/ (see the protoc message above)");
}
