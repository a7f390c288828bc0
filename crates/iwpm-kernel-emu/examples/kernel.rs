//! One emulated kernel on a Unix socket, for running `iwpmd` by hand (README, "Run a
//! daemon by hand over the emulator"): `cargo run -p iwpm-kernel-emu --example kernel --
//! DIR` binds `DIR/kernel.sock` (host 127.0.0.1, port-mapped like a hardware RNIC), prints
//! the `iwpmd` and `iwpmctl` commands to paste, waits for the daemon, opens one listener
//! on 127.0.0.1:4000 through it, and holds everything until Ctrl-C (the daemon is stopped
//! in its own terminal: it does not notice that the emulated kernel is gone).

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
    // The daemon does not notice: over the Unix link it would learn only on its next send
    // (a connected datagram socket is not told that its peer closed), and it sends only to
    // answer the kernel, which is gone. A real kernel never goes away, so nothing watches.
    println!(
        "Ctrl-C stops this kernel; stop the daemon with Ctrl-C in its own terminal (it \
         does not notice that an emulated kernel is gone)"
    );
    loop {
        std::thread::park();
    }
}
