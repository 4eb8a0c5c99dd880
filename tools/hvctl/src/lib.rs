//! hvctl's library side: the small HTTP/1.1 client (HTTPS with a pinned
//! certificate: `tls`) the CLI uses, shared
//! with the xtask's boot tests so there is one client to keep correct.

pub mod http;
pub mod tls;
