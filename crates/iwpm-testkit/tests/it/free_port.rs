//! The free-port helper, each test alone in a process of its own: a child spawned by a
//! neighbouring test holds every socket of ours from its fork until its exec, so a probe
//! made while another test spawns can look taken for that moment. Nothing here spawns.

use std::net::{Ipv4Addr, UdpSocket};

use iwpm_testkit::alone::in_own_process;
use iwpm_testkit::net::{ephemeral_low, free_udp_port, free_udp_port_on};

#[test]
fn a_free_port_binds_on_every_address_asked() {
    if in_own_process("free_port::a_free_port_binds_on_every_address_asked") {
        return;
    }
    let ips = [Ipv4Addr::LOCALHOST, Ipv4Addr::new(127, 0, 0, 2)];
    for _ in 0..50 {
        let port = free_udp_port_on(&ips);
        let held: Vec<UdpSocket> = ips
            .iter()
            .map(|ip| UdpSocket::bind((*ip, port)).expect("free a moment ago"))
            .collect();
        assert_eq!(held.len(), ips.len());
    }
}

#[test]
fn a_free_port_is_below_the_ephemeral_range() {
    if in_own_process("free_port::a_free_port_is_below_the_ephemeral_range") {
        return;
    }
    let Some(low) = ephemeral_low() else {
        iwpm_testkit::host::say_skipped(
            "a_free_port_is_below_the_ephemeral_range",
            "/proc/sys/net/ipv4/ip_local_port_range is not readable",
        );
        return;
    };
    for _ in 0..50 {
        let port = free_udp_port();
        assert!(
            (10_000..low).contains(&port),
            "{port}, the range starts at {low}"
        );
    }
}

#[test]
fn a_port_taken_on_one_address_is_not_handed_out() {
    if in_own_process("free_port::a_port_taken_on_one_address_is_not_handed_out") {
        return;
    }
    // (every port handed out while these are held must avoid them)
    let taken: Vec<UdpSocket> = (0..20)
        .map(|_| UdpSocket::bind((Ipv4Addr::new(127, 0, 0, 2), free_udp_port())).unwrap())
        .collect();
    let ports: Vec<u16> = taken
        .iter()
        .map(|s| s.local_addr().unwrap().port())
        .collect();
    for _ in 0..200 {
        assert!(!ports.contains(&free_udp_port()));
    }
}
