//! The HTTP client under every version's generated client: timeouts, pooling and the site's CAs
//! (`ca_file`), for slurmrestd behind TLS.

use std::time::Duration;

use super::{Client, ClientConfig, Dialects};
use crate::ApiVersion;
use crate::convert;
use crate::dialect::Dialect;

impl Client {
    pub(super) fn http(
        cfg: &ClientConfig,
        timeout: Duration,
    ) -> Result<(reqwest::Client, Dialects), String> {
        let mut builder = reqwest::Client::builder()
            .connect_timeout(cfg.connect_timeout)
            .timeout(timeout)
            .pool_idle_timeout(Duration::from_secs(60));
        if let Some(path) = &cfg.ca_file {
            builder = builder.tls_certs_merge(read_ca_file(path)?);
        }
        let http = builder
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        let base = cfg.base_url.as_str().trim_end_matches('/').to_string();
        let dialects = Dialects(ApiVersion::ALL.map(|v| dialect(v, &base, &http)));
        Ok((http, dialects))
    }
}

/// Version `v`'s dialect, speaking to `base` through `http`. The one place that names each
/// version's module: adding a version is its module (`convert/v00NN.rs`) and an arm here.
fn dialect(v: ApiVersion, base: &str, http: &reqwest::Client) -> Box<dyn Dialect> {
    let http = http.clone();
    match v {
        ApiVersion::V0040 => Box::new(convert::v0040::Api::new(base, http)),
        ApiVersion::V0041 => Box::new(convert::v0041::Api::new(base, http)),
        ApiVersion::V0042 => Box::new(convert::v0042::Api::new(base, http)),
        ApiVersion::V0043 => Box::new(convert::v0043::Api::new(base, http)),
        ApiVersion::V0044 => Box::new(convert::v0044::Api::new(base, http)),
        ApiVersion::V0045 => Box::new(convert::v0045::Api::new(base, http)),
        ApiVersion::V0046 => Box::new(convert::v0046::Api::new(base, http)),
    }
}

/// The CAs of `ca_file`: a PEM bundle with at least one certificate.
fn read_ca_file(path: &std::path::Path) -> Result<Vec<reqwest::Certificate>, String> {
    let pem = std::fs::read(path).map_err(|e| {
        format!(
            "cannot read the CA file {} (`ca_file` / FLYTE_SLURM_CA_FILE): {e}",
            path.display()
        )
    })?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
        format!(
            "the CA file {} (`ca_file` / FLYTE_SLURM_CA_FILE) is not a PEM bundle: {e}",
            path.display()
        )
    })?;
    if certs.is_empty() {
        return Err(format!(
            "the CA file {} (`ca_file` / FLYTE_SLURM_CA_FILE) holds no certificate; it must hold \
             the site CA's `-----BEGIN CERTIFICATE-----` block(s)",
            path.display()
        ));
    }
    Ok(certs)
}
