//! hvctl's run-time partition and image commands: resources, create, edit, delete, upload (with a progress line), images, fetch.

use std::io::Write;
use std::time::{Duration, Instant};

use hvctl::http::{self, Endpoint, FullReply};
use pinfold_manager_api::json::{Image, ImageList, PartitionDetailJson, ResourcesJson};
use serde_json::{json, Map, Value};

use crate::cli::{Cli, Command, ImageArg, ImageSpec, PartitionSpec};
use crate::{api_error, decode_full, encode_segment, format, RunError};

/// Least time between two progress lines.
const PROGRESS_EVERY: Duration = Duration::from_millis(200);

/// Runs one of this module's commands; progress lines go to `err`.
pub fn run(
    cli: &Cli,
    ep: &Endpoint,
    out: &mut impl Write,
    err: &mut dyn Write,
) -> Result<(), RunError> {
    let token = cli.token.as_deref();
    match &cli.command {
        Command::Resources => {
            let reply = checked(http::request_full(
                ep,
                "GET",
                "/api/v1/resources",
                None,
                &[],
                None,
            )?)?;
            let res: ResourcesJson = decode_full(&reply)?;
            if cli.json {
                print_json(out, &reply)?;
            } else {
                out.write_all(format::resources(&res).as_bytes())?;
            }
        }
        Command::Images => {
            let reply = checked(http::request_full(
                ep,
                "GET",
                "/api/v1/images",
                None,
                &[],
                None,
            )?)?;
            let list: ImageList = decode_full(&reply)?;
            if cli.json {
                print_json(out, &reply)?;
            } else {
                out.write_all(format::images(&list.images).as_bytes())?;
            }
        }
        Command::Upload { file, image } => {
            let reply = upload_file(ep, token, file, image, err)?;
            let img: Image = decode_full(&reply)?;
            if cli.json {
                print_json(out, &reply)?;
            } else {
                writeln!(
                    out,
                    "image {} ({} {}, {} bytes): {}",
                    img.id,
                    img.kind.as_str(),
                    img.name,
                    img.size,
                    state_of(&img)
                )?;
            }
        }
        Command::Fetch { url, image } => {
            let mut body = json!({"url": url, "kind": image.kind});
            if let Some(name) = &image.name {
                body["name"] = json!(name);
            }
            if let Some(sha) = &image.sha256 {
                body["sha256"] = json!(sha);
            }
            let reply = checked(http::request_full(
                ep,
                "POST",
                "/api/v1/images/fetch",
                token,
                &[],
                Some(body.to_string().as_bytes()),
            )?)?;
            let img: Image = decode_full(&reply)?;
            if cli.json {
                print_json(out, &reply)?;
            } else {
                writeln!(
                    out,
                    "image {} ({} {}, {} bytes): fetching (hvctl images shows its progress)",
                    img.id,
                    img.kind.as_str(),
                    img.name,
                    img.size
                )?;
            }
        }
        Command::Create { name, spec } => {
            let mut body = config_body(ep, token, spec, err)?;
            body.insert("name".into(), json!(name));
            let reply = checked(http::request_full(
                ep,
                "POST",
                "/api/v1/partitions",
                token,
                &[],
                Some(Value::Object(body).to_string().as_bytes()),
            )?)?;
            let p: PartitionDetailJson = decode_full(&reply)?;
            if cli.json {
                print_json(out, &reply)?;
            } else {
                writeln!(
                    out,
                    "{}: created ({})",
                    p.summary.name,
                    p.summary.state.as_str()
                )?;
            }
        }
        Command::Edit { name, spec } => {
            let path = format!("/api/v1/partitions/{}", encode_segment(name));
            let current = checked(http::request_full(ep, "GET", &path, None, &[], None)?)?;
            let etag = current.header("ETag").map(str::to_string);
            let mut body = config_body(ep, token, spec, err)?;
            if let Some(new) = &spec.rename {
                body.insert("name".into(), json!(new));
            }
            let extra: Vec<(&str, &str)> = etag.iter().map(|t| ("If-Match", t.as_str())).collect();
            let reply = checked(http::request_full(
                ep,
                "PATCH",
                &path,
                token,
                &extra,
                Some(Value::Object(body).to_string().as_bytes()),
            )?)?;
            let p: PartitionDetailJson = decode_full(&reply)?;
            if cli.json {
                print_json(out, &reply)?;
            } else {
                writeln!(out, "{}: changed", p.summary.name)?;
            }
        }
        Command::ImageDelete { id } => {
            let path = format!("/api/v1/images/{id}");
            checked(http::request_full(ep, "DELETE", &path, token, &[], None)?)?;
            if cli.json {
                writeln!(out, "{}", json!({"id": id, "deleted": true}))?;
            } else {
                writeln!(out, "image {id}: deleted")?;
            }
        }
        Command::Delete { name } => {
            let path = format!("/api/v1/partitions/{}", encode_segment(name));
            checked(http::request_full(ep, "DELETE", &path, token, &[], None)?)?;
            if cli.json {
                writeln!(out, "{}", json!({"name": name, "deleted": true}))?;
            } else {
                writeln!(out, "{name}: deleted")?;
            }
        }
        _ => unreachable!("main routes only this module's commands here"),
    }
    Ok(())
}

fn state_of(img: &Image) -> String {
    match &img.error {
        Some(e) => format!("{:?}: {e}", img.state),
        None => format!("{:?}", img.state).to_lowercase(),
    }
}

fn print_json(out: &mut impl Write, reply: &FullReply) -> Result<(), RunError> {
    out.write_all(&reply.body)?;
    writeln!(out)?;
    Ok(())
}

/// The reply, or the API's error.
fn checked(reply: FullReply) -> Result<FullReply, RunError> {
    if (200..300).contains(&reply.status) {
        Ok(reply)
    } else {
        Err(api_error(reply.status, &reply.body))
    }
}

/// The JSON fields of a create or change; image files are uploaded first
/// and replaced by their ids.
fn config_body(
    ep: &Endpoint,
    token: Option<&str>,
    spec: &PartitionSpec,
    err: &mut dyn Write,
) -> Result<Map<String, Value>, RunError> {
    let mut body = Map::new();
    let mut image = |arg: &ImageArg, kind: &str| -> Result<String, RunError> {
        match arg {
            ImageArg::Id(id) => Ok(id.clone()),
            ImageArg::File(file) => {
                let spec = ImageSpec {
                    kind: kind.into(),
                    name: None,
                    sha256: None,
                };
                let reply = upload_file(ep, token, file, &spec, err)?;
                Ok(decode_full::<Image>(&reply)?.id)
            }
        }
    };
    if let Some(k) = &spec.kernel {
        body.insert("kernel".into(), json!(image(k, "kernel")?));
    }
    if let Some(i) = &spec.initrd {
        body.insert("initrd".into(), json!(image(i, "initrd")?));
    }
    if let Some(cpus) = &spec.cpus {
        body.insert("cpus".into(), json!(cpus));
    }
    if let Some(m) = spec.memory_mib {
        body.insert("memory_mib".into(), json!(m));
    }
    let strings = [
        ("kernel_format", &spec.kernel_format),
        ("bootargs", &spec.bootargs),
        ("restart", &spec.restart),
    ];
    for (key, value) in strings {
        if let Some(v) = value {
            body.insert(key.into(), json!(v));
        }
    }
    if let Some(a) = spec.autostart {
        body.insert("autostart".into(), json!(a));
    }
    if let Some(pci) = &spec.pci {
        body.insert("pci".into(), json!(pci));
    }
    let numbers = [
        ("restart_limit", spec.restart_limit),
        ("watchdog_s", spec.watchdog_s),
        ("shutdown_timeout_s", spec.shutdown_timeout_s),
    ];
    for (key, value) in numbers {
        if let Some(v) = value {
            body.insert(key.into(), json!(v));
        }
    }
    Ok(body)
}

/// Percent-encodes a query value.
fn encode_query(s: &str) -> String {
    encode_segment(s)
}

/// Uploads `file` as an image, drawing a progress line on `err`.
pub fn upload_file(
    ep: &Endpoint,
    token: Option<&str>,
    file: &str,
    image: &ImageSpec,
    err: &mut dyn Write,
) -> Result<FullReply, RunError> {
    let file_err = |e: std::io::Error| RunError::File {
        path: file.to_string(),
        why: e.to_string(),
    };
    let mut f = std::fs::File::open(file).map_err(file_err)?;
    let total = f.metadata().map_err(file_err)?.len();
    let name = image.name.clone().unwrap_or_else(|| {
        std::path::Path::new(file)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| file.to_string())
    });
    let mut path = format!(
        "/api/v1/images?kind={}&name={}",
        encode_query(&image.kind),
        encode_query(&name)
    );
    if let Some(sha) = &image.sha256 {
        path.push_str(&format!("&sha256={}", encode_query(sha)));
    }
    let started = Instant::now();
    let mut last: Option<Instant> = None;
    let mut progress = |sent: u64| {
        let now = Instant::now();
        if sent == total || last.is_none_or(|t| now - t >= PROGRESS_EVERY) {
            last = Some(now);
            let line = format::progress_line(&name, sent, total, now - started);
            let _ = write!(err, "\r{line}");
            let _ = err.flush();
        }
    };
    let reply = http::upload(ep, &path, token, total, &mut f, &mut progress);
    let _ = writeln!(err);
    checked(reply?)
}
