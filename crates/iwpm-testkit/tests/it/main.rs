//! The test kit's own tests, one test binary (a module per helper it checks).

mod daemon_handle;
mod free_port;
