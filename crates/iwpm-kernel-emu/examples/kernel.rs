//! One emulated kernel on a Unix socket, for running `iwpmd` by hand (README, "Run a
//! daemon by hand over the emulator"): `cargo run -p iwpm-kernel-emu --example kernel --
//! DIR` binds `DIR/kernel.sock` (host 127.0.0.1, port-mapped like a hardware RNIC), prints
//! the `iwpmd` and `iwpmctl` commands to paste, waits for the daemon, opens one listener
//! on 127.0.0.1:4000 through it, and holds everything until Ctrl-C.

use std::path::PathBuf;
use std::time::Duration;

use iwpm_kernel_emu::{AcceptMode, Fabric, HostConfig, PortMapMode};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(
        std::env::args_os()
            .nth(1)
            .ok_or("usage: kernel DIR (DIR/kernel.sock becomes the emulated kernel)")?,
    );
    std::fs::create_dir_all(&dir)?;
    let socket = std::fs::canonicalize(&dir)?.join("kernel.sock");
    let fabric = Fabric::new();
    let host = fabric.add_host(
        HostConfig::new("hand", "127.0.0.1".parse()?, &socket).with_mode(PortMapMode::PortMapped),
    )?;
    println!("emulated kernel at {}; start the daemon:", socket.display());
    println!(
        "  target/debug/iwpmd --foreground --log-stderr --kernel unix:{} --config none \
         --no-ipv6 --peer-bind-v4 127.0.0.1 --peer-port 13935",
        socket.display()
    );
    while !host.wait_for_daemon(Duration::from_secs(60)) {
        println!("(still waiting for a daemon on {})", socket.display());
    }
    let listener = host.listen("127.0.0.1:4000".parse()?, AcceptMode::Auto, None)?;
    println!(
        "daemon up; listening on {} (mapped {}); inspect it:",
        listener.info.local, listener.info.mapped_local
    );
    println!(
        "  target/debug/iwpmctl --socket {}.control status",
        socket.display()
    );
    println!("Ctrl-C stops the kernel (the daemon then exits on its own or with Ctrl-C)");
    loop {
        std::thread::park();
    }
}
