//! The lab's integration tests, one test binary: the `iwpm-lab` binary end to end (`cli`,
//! `hold`, `unprivileged`), and labs of two real `iwpmd` processes driven from here
//! (`connect`, `faults`, `netns`, with the helpers of `common`). The binary is always
//! given the daemon this run built (`common::lab_command`).

mod cli;
mod common;
mod connect;
mod faults;
mod hold;
mod netns;
mod unprivileged;
