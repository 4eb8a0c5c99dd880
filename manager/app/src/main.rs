//! Pinfold's management partition: for now a hello-world HTTP server on Hermit.
//!
//! The REST API (crate `manager/api`) is wired in later; this binary proves
//! the build pipeline and the EL1 loader: Hermit brings up virtio-net, gets
//! an address over DHCP, and std::net + tiny_http answer on port 8080.

use std::process::ExitCode;

use tiny_http::{Header, Response, Server};

/// Where the server listens (all interfaces: the address comes from DHCP).
const LISTEN: &str = "0.0.0.0:8080";
/// The body of every answer.
const HELLO: &str = r#"{"hello":"pinfold-manager"}"#;

fn main() -> ExitCode {
    println!("pinfold-manager: listening on {LISTEN}");
    let server = match Server::http(LISTEN) {
        Ok(server) => server,
        Err(err) => {
            eprintln!("pinfold-manager: cannot listen on {LISTEN}: {err}");
            return ExitCode::FAILURE;
        }
    };
    // The header is a constant: `from_bytes` only fails on non-ASCII input.
    let content_type = Header::from_bytes(&b"Content-Type"[..], &b"application/json"[..]).ok();
    for request in server.incoming_requests() {
        let mut response = Response::from_string(HELLO);
        if let Some(header) = &content_type {
            response.add_header(header.clone());
        }
        // A client that hangs up early is its own problem, not the server's.
        if let Err(err) = request.respond(response) {
            eprintln!("pinfold-manager: answering failed: {err}");
        }
    }
    ExitCode::SUCCESS
}
