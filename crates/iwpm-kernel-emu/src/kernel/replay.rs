//! `iwpm_send_mapinfo`: replaying the mapinfo table to a (re)started daemon
//! (`docs/protocol.md` §5.4).
//!
//! Records are packed into datagrams of at most `NLMSG_GOODSIZE` bytes; a datagram is sent
//! as soon as the room left is less than twice the last record, each ends with a
//! payload-less `NLMSG_DONE`, and all sends are non-blocking. Needing datagram number
//! `IWPM_MAPINFO_SKB_COUNT` aborts the replay with -ENOMEM; any send failure aborts it too.
//! Only a complete replay is followed by MAPINFO_NUM.

use iwpm_proto::consts::RDMA_NL_IWCM;
use iwpm_proto::kernel_side::requests::{
    encode_mapinfo_end, encode_mapinfo_record, encode_request, mapinfo_num, mapping_flags,
};
use iwpm_proto::netlink::MapInfoRecord;

use super::{KernelIwpm, Link, SendMode};

/// `-ENOMEM`.
const ENOMEM: i32 = -12;

impl<A: Clone + PartialEq + std::fmt::Debug> KernelIwpm<A> {
    /// Returns the handler result: 0, or the error that aborted the replay.
    pub(super) fn send_mapinfo(&mut self, link: &mut dyn Link<A>) -> i32 {
        self.stats.replays += 1;
        let pid = self.pid;
        let entries = self.mapinfo.entries().to_vec();
        let mut skb = Vec::new();
        let mut skb_num = 1usize;
        let mut bytes = 0usize;
        let mut in_batch = 0u64;
        let mut mapping_num = 0u32;
        for e in entries {
            let start = skb.len();
            let record = MapInfoRecord {
                local_addr: e.local,
                mapped_addr: e.mapped,
                flags: mapping_flags(self.ulib_version, e.flags),
                unknown: Vec::new(),
            };
            encode_mapinfo_record(RDMA_NL_IWCM, record, &mut skb);
            let len = skb.len() - start;
            mapping_num += 1;
            in_batch += 1;
            bytes += len;
            if self.config.nlmsg_goodsize.saturating_sub(bytes) < len * 2 {
                bytes = 0;
                skb_num += 1;
                encode_mapinfo_end(&mut skb);
                let sent = self.unicast(pid, &skb, SendMode::NonBlocking, link);
                skb.clear();
                if let Err(e) = sent {
                    tracing::warn!(error = %e, "iwpm_send_mapinfo: Unable to send map info");
                    self.stats.replays_aborted += 1;
                    return e.errno();
                }
                self.stats.mapinfo_batches_sent += 1;
                self.stats.mapinfo_records_sent += in_batch;
                in_batch = 0;
                if skb_num == self.config.mapinfo_skb_count {
                    tracing::warn!("iwpm_send_mapinfo: Insufficient skbs for map info");
                    self.stats.replays_aborted += 1;
                    return ENOMEM;
                }
            }
        }
        // The last batch (possibly just the DONE); its send result is not checked.
        encode_mapinfo_end(&mut skb);
        if self.unicast(pid, &skb, SendMode::NonBlocking, link).is_ok() {
            self.stats.mapinfo_batches_sent += 1;
            self.stats.mapinfo_records_sent += in_batch;
        }
        self.send_mapinfo_num(mapping_num, link)
    }

    fn send_mapinfo_num(&mut self, send_num: u32, link: &mut dyn Link<A>) -> i32 {
        let seq = self.next_seq();
        let buf = encode_request(seq, &mapinfo_num(send_num));
        match self.unicast(self.pid, &buf, SendMode::NonBlocking, link) {
            Ok(()) => {
                self.stats.mapinfo_num_sent += 1;
                self.mapinfo_num_outstanding.push_back(send_num);
                0
            }
            Err(e) => e.errno(),
        }
    }
}
