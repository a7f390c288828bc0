//! The control socket's and `iwpmctl`'s integration tests, one test binary: a module per
//! subject (renderings, the manual page, the fuzz corpus, and `iwpmctl` against real
//! daemons in the lab, read by node_exporter too).

mod fuzz_corpus;
mod lab;
mod man_page;
mod node_exporter;
mod render;
