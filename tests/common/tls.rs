//! A throwaway CA and certificates it signs for `localhost` / 127.0.0.1, made with the openssl
//! CLI (Debian's `openssl`, which `.ci/run` installs for the `tls` tier): the TLS tests of the
//! gRPC port (service_tls, conformance) and of slurmrestd behind stunnel4 (real_identity).

use std::path::{Path, PathBuf};

use super::skip::{Tier, skip};

pub fn on_path(cmd: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn run(args: &[&str], dir: &Path) {
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("openssl: {e}"));
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub struct TestCa {
    pub dir: PathBuf,
    /// The CA's certificate (PEM): what a client trusts.
    pub ca: PathBuf,
}

impl TestCa {
    /// A new CA in a fresh folder, or `None` (after skipping, a failure where CI requires the
    /// `tls` tier) without openssl.
    pub fn new(tag: &str) -> Option<TestCa> {
        if !on_path("openssl") {
            skip(
                Tier::Tls,
                "openssl is not on PATH (`apt-get install -y openssl`)",
            );
            return None;
        }
        let dir = super::fresh_dir(&format!("sc-ca-{tag}"));
        run(
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "1",
                "-subj",
                "/CN=slurm-connector test CA",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
            &dir,
        );
        let ca = dir.join("ca.pem");
        Some(TestCa { dir, ca })
    }

    /// A server certificate for `localhost` and 127.0.0.1 with common name `cn`, signed by this
    /// CA: (certificate, key) files named after `cn`.
    pub fn server_cert(&self, cn: &str) -> (PathBuf, PathBuf) {
        let (key, csr, pem, ext) = (
            format!("{cn}.key"),
            format!("{cn}.csr"),
            format!("{cn}.pem"),
            format!("{cn}.cnf"),
        );
        run(
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                &format!("/CN={cn}"),
            ],
            &self.dir,
        );
        std::fs::write(
            self.dir.join(&ext),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
             keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        run(
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &pem,
                "-days",
                "1",
                "-extfile",
                &ext,
            ],
            &self.dir,
        );
        (self.dir.join(pem), self.dir.join(key))
    }
}
