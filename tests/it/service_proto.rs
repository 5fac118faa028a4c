//! The fixtures are real CreateTaskRequests made by the published Flyte SDK + flyteplugins-slurm.
//! Decoding each `.pb` with our proto subset must (1) lose nothing the SDK sent — re-encoding gives
//! the same bytes — and (2) read the same values as the protobuf-JSON `.json` beside it.

use std::path::{Path, PathBuf};

use prost::Message;
use serde_json::Value;
use slurm_connector::proto::{self, connector::CreateTaskRequest, core::literal, core::scalar};

fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/requests");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pb"))
        .collect();
    v.sort();
    assert!(
        v.len() >= 6,
        "expected the six SDK fixtures in {}",
        dir.display()
    );
    v
}

fn load(pb: &Path) -> (Vec<u8>, CreateTaskRequest, Value) {
    let bytes = std::fs::read(pb).unwrap();
    let req = CreateTaskRequest::decode(bytes.as_slice())
        .unwrap_or_else(|e| panic!("{}: {e}", pb.display()));
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(pb.with_extension("json")).unwrap()).unwrap();
    (bytes, req, json)
}

fn s<'a>(v: &'a Value, path: &[&str]) -> &'a Value {
    path.iter().fold(v, |v, k| &v[*k])
}

fn str_or_empty(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

#[test]
fn reencoding_a_fixture_gives_the_same_bytes() {
    for pb in fixtures() {
        let (bytes, req, _) = load(&pb);
        let again = req.encode_to_vec();
        if again != bytes {
            // Map entries may be ordered differently by the two encoders; anything else dropped
            // (an undeclared field) shows up as a length difference.
            assert_eq!(
                again.len(),
                bytes.len(),
                "{}: a field was dropped",
                pb.display()
            );
            assert_eq!(CreateTaskRequest::decode(again.as_slice()).unwrap(), req);
        }
    }
}

#[test]
fn decoded_fixture_matches_its_json() {
    for pb in fixtures() {
        let (_, req, j) = load(&pb);
        let name = pb.display().to_string();
        let t = req.template.as_ref().expect("template");
        assert_eq!(
            t.r#type,
            str_or_empty(s(&j, &["template", "type"])),
            "{name}"
        );
        let id = t.id.as_ref().unwrap();
        assert_eq!(
            id.name,
            str_or_empty(s(&j, &["template", "id", "name"])),
            "{name}"
        );
        assert_eq!(
            id.project,
            str_or_empty(s(&j, &["template", "id", "project"]))
        );
        assert_eq!(id.org, str_or_empty(s(&j, &["template", "id", "org"])));
        assert_eq!(
            req.output_prefix,
            str_or_empty(&j["outputPrefix"]),
            "{name}"
        );

        // custom: the whole Struct, compared as JSON values (numbers as f64 on both sides).
        let custom = t
            .custom
            .as_ref()
            .map(proto::struct_to_json)
            .unwrap_or(Value::Null);
        assert_eq!(
            normalize(&custom),
            normalize(s(&j, &["template", "custom"])),
            "{name}"
        );

        // Execution identity.
        let tem = req.task_execution_metadata.as_ref().unwrap();
        let jm = &j["taskExecutionMetadata"];
        let node = tem
            .task_execution_id
            .as_ref()
            .unwrap()
            .node_execution_id
            .as_ref()
            .unwrap();
        assert_eq!(
            node.node_id,
            str_or_empty(s(jm, &["taskExecutionId", "nodeExecutionId", "nodeId"]))
        );
        let exec = node.execution_id.as_ref().unwrap();
        let je = s(jm, &["taskExecutionId", "nodeExecutionId", "executionId"]);
        assert_eq!(exec.name, str_or_empty(&je["name"]), "{name}");
        assert_eq!(exec.project, str_or_empty(&je["project"]));
        assert_eq!(exec.domain, str_or_empty(&je["domain"]));
        let env = jm["environmentVariables"].as_object().unwrap();
        assert_eq!(tem.environment_variables.len(), env.len(), "{name}");
        for (k, v) in env {
            assert_eq!(
                tem.environment_variables.get(k).map(String::as_str),
                v.as_str(),
                "{name}: {k}"
            );
        }

        // Inputs: names, order and values.
        let jl = j["inputs"]["literals"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let lits = req
            .inputs
            .as_ref()
            .map(|i| i.literals.clone())
            .unwrap_or_default();
        assert_eq!(lits.len(), jl.len(), "{name}");
        for (l, jl) in lits.iter().zip(&jl) {
            assert_eq!(l.name, str_or_empty(&jl["name"]));
            let Some(literal::Value::Scalar(sc)) = l.value.as_ref().and_then(|v| v.value.as_ref())
            else {
                panic!("{name}: input {} is not a scalar", l.name)
            };
            let js = &jl["value"]["scalar"];
            match sc.value.as_ref().unwrap() {
                scalar::Value::Primitive(p) => {
                    use proto::core::primitive::Value as P;
                    let jp = &js["primitive"];
                    match p.value.as_ref().unwrap() {
                        P::Integer(i) => assert_eq!(i.to_string(), str_or_empty(&jp["integer"])),
                        P::FloatValue(f) => assert_eq!(Some(*f), jp["floatValue"].as_f64()),
                        P::StringValue(v) => assert_eq!(v, str_or_empty(&jp["stringValue"])),
                        P::Boolean(b) => assert_eq!(Some(*b), jp["boolean"].as_bool()),
                        other => panic!("{name}: unexpected primitive {other:?}"),
                    }
                }
                scalar::Value::Blob(b) => {
                    assert_eq!(b.uri, str_or_empty(&js["blob"]["uri"]));
                    let dim = b
                        .metadata
                        .as_ref()
                        .and_then(|m| m.r#type.as_ref())
                        .map(|t| t.dimensionality);
                    let jdim = s(js, &["blob", "metadata", "type", "dimensionality"]);
                    assert_eq!(
                        dim.unwrap_or(0) == 1,
                        jdim == "MULTIPART",
                        "{name}: {}",
                        l.name
                    );
                }
                other => panic!("{name}: unexpected scalar {other:?}"),
            }
        }

        // Interface outputs: keys in order.
        let outs: Vec<String> = t
            .interface
            .as_ref()
            .and_then(|i| i.outputs.as_ref())
            .map(|o| o.variables.iter().map(|v| v.key.clone()).collect())
            .unwrap_or_default();
        let jouts: Vec<String> = s(&j, &["template", "interface", "outputs", "variables"])
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|v| str_or_empty(&v["key"]).to_string())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(outs, jouts, "{name}");

        // Container image and args when present.
        if let Some(proto::core::task_template::Target::Container(c)) = &t.target {
            let jc = &j["template"]["container"];
            assert_eq!(c.image, str_or_empty(&jc["image"]), "{name}");
            let jargs: Vec<&str> = jc["args"]
                .as_array()
                .map(|a| a.iter().map(str_or_empty).collect())
                .unwrap_or_default();
            assert_eq!(c.args, jargs, "{name}");
            let jenv = jc["env"].as_array().map(|a| a.len()).unwrap_or(0);
            assert_eq!(c.env.len(), jenv, "{name}");
        }
    }
}

/// Integers and floats compare as f64, so `2` (JSON) equals `2.0` (Struct).
fn normalize(v: &Value) -> Value {
    match v {
        Value::Number(n) => serde_json::json!(n.as_f64().unwrap()),
        Value::Array(a) => Value::Array(a.iter().map(normalize).collect()),
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, v)| (k.clone(), normalize(v))).collect())
        }
        other => other.clone(),
    }
}
