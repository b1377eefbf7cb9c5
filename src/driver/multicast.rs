//! A device's multicast groups: which QPs are attached to which group (rxe_mcast.c's mcg and
//! mca lists), and the sockets that receive each group's datagrams.
//!
//! RoCEv2 multicast is IP multicast: a group's MGID is its IP address (IPv4-mapped for IPv4),
//! and its packets are UDP datagrams to that address on the RoCEv2 port. Where rxe adds the
//! group's MAC address to its netdev's filter, softroce joins the IP group on a socket bound
//! to the group's address, on the interface of the device's address (the kernel then sends
//! the IGMP or MLD report, and loops the group's datagrams back to local members, this
//! process's and others'). A socket bound to one group address receives only that group, so
//! each group has a socket of its own: it is made when the group's first QP attaches (so that
//! a failure is the attach's error) and handed to the engine, whose link receives from it.
//!
//! spec-notes/uc-ud-srq.md, rules 30 to 33.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, UdpSocket};

use crate::ib::{DeviceLimits, VerbsError};
use crate::transport::Members;

/// A change the engine's link must make: start or stop receiving a group.
#[derive(Debug)]
pub(crate) enum GroupChange {
    /// Receive the group's datagrams from this socket (bound to the group, member of it).
    Join(IpAddr, UdpSocket),
    /// Stop receiving the group (the socket is closed, which leaves it).
    Leave(IpAddr),
}

/// The groups QPs are attached to.
#[derive(Debug, Default)]
pub(crate) struct Groups {
    members: HashMap<IpAddr, Vec<u32>>,
    attachments: usize,
}

impl Groups {
    /// The QPs attached to `group`.
    pub(crate) fn members(&self, group: IpAddr) -> Members {
        let mut m = Members::default();
        for &qpn in self.members.get(&group).map_or(&[][..], Vec::as_slice) {
            m.push(qpn);
        }
        m
    }

    /// Whether QP `qpn` is attached to any group.
    pub(crate) fn has_qp(&self, qpn: u32) -> bool {
        self.members.values().any(|m| m.contains(&qpn))
    }

    /// Attaches QP `qpn` to `group` (rxe_attach_mcast). Attaching a QP that is attached
    /// already succeeds and changes nothing. A group's first QP makes its socket, with
    /// `open`, and returns the change for the engine.
    pub(crate) fn attach(
        &mut self,
        limits: &DeviceLimits,
        group: IpAddr,
        qpn: u32,
        open: impl FnOnce() -> io::Result<UdpSocket>,
    ) -> Result<Option<GroupChange>, VerbsError> {
        if let Some(m) = self.members.get(&group) {
            if m.contains(&qpn) {
                return Ok(None);
            }
            if m.len() >= limits.max_mcast_qp_attach as usize {
                return Err(VerbsError::ExceedsDeviceLimit {
                    what: "QPs attached to a multicast group",
                    requested: m.len() as u64 + 1,
                    limit: limits.max_mcast_qp_attach.into(),
                });
            }
        } else if self.members.len() >= limits.max_mcast_grp as usize {
            return Err(VerbsError::ExceedsDeviceLimit {
                what: "multicast groups",
                requested: self.members.len() as u64 + 1,
                limit: limits.max_mcast_grp.into(),
            });
        }
        if self.attachments >= limits.max_total_mcast_qp_attach as usize {
            return Err(VerbsError::ExceedsDeviceLimit {
                what: "multicast attachments",
                requested: self.attachments as u64 + 1,
                limit: limits.max_total_mcast_qp_attach.into(),
            });
        }
        let change = if self.members.contains_key(&group) {
            None
        } else {
            Some(GroupChange::Join(group, open()?))
        };
        self.members.entry(group).or_default().push(qpn);
        self.attachments += 1;
        Ok(change)
    }

    /// Detaches QP `qpn` from `group` (rxe_detach_mcast): NotFound if it is not attached. The
    /// group's last QP returns the change that closes its socket.
    pub(crate) fn detach(
        &mut self,
        group: IpAddr,
        qpn: u32,
    ) -> Result<Option<GroupChange>, VerbsError> {
        let m = self
            .members
            .get_mut(&group)
            .ok_or(VerbsError::NotFound("multicast group"))?;
        let i = m
            .iter()
            .position(|&q| q == qpn)
            .ok_or(VerbsError::NotFound("multicast attachment"))?;
        m.swap_remove(i);
        self.attachments -= 1;
        if m.is_empty() {
            self.members.remove(&group);
            return Ok(Some(GroupChange::Leave(group)));
        }
        Ok(None)
    }

    /// Detaches QP `qpn` from every group; returns the changes for the engine.
    pub(crate) fn detach_all(&mut self, qpn: u32) -> Vec<GroupChange> {
        let groups: Vec<IpAddr> = self
            .members
            .iter()
            .filter(|(_, m)| m.contains(&qpn))
            .map(|(g, _)| *g)
            .collect();
        groups
            .into_iter()
            .filter_map(|g| self.detach(g, qpn).ok().flatten())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(groups: u32, per_group: u32) -> DeviceLimits {
        DeviceLimits {
            max_mcast_grp: groups,
            max_mcast_qp_attach: per_group,
            max_total_mcast_qp_attach: groups * per_group,
            ..DeviceLimits::default()
        }
    }

    fn placeholder() -> io::Result<UdpSocket> {
        UdpSocket::bind("127.0.0.1:0")
    }

    #[test]
    fn the_first_attach_joins_the_last_detach_leaves_and_a_repeat_changes_nothing() {
        let l = limits(2, 2);
        let g: IpAddr = "230.1.2.3".parse().unwrap();
        let mut t = Groups::default();
        assert!(matches!(
            t.attach(&l, g, 17, placeholder),
            Ok(Some(GroupChange::Join(x, _))) if x == g
        ));
        assert!(matches!(t.attach(&l, g, 17, placeholder), Ok(None)));
        assert!(matches!(t.attach(&l, g, 18, placeholder), Ok(None)));
        assert_eq!(t.members(g).as_slice(), &[17, 18]);
        assert!(matches!(
            t.attach(&l, g, 19, placeholder),
            Err(VerbsError::ExceedsDeviceLimit { limit: 2, .. })
        ));
        assert!(matches!(t.detach(g, 17), Ok(None)));
        assert!(matches!(t.detach(g, 17), Err(VerbsError::NotFound(_))));
        assert!(matches!(t.detach(g, 18), Ok(Some(GroupChange::Leave(x))) if x == g));
        assert!(matches!(t.detach(g, 18), Err(VerbsError::NotFound(_))));
        assert!(t.members(g).as_slice().is_empty());
    }

    #[test]
    fn groups_are_bounded_and_a_failed_open_attaches_nothing() {
        let l = limits(1, 4);
        let (a, b): (IpAddr, IpAddr) = ("230.0.0.1".parse().unwrap(), "230.0.0.2".parse().unwrap());
        let mut t = Groups::default();
        let fails = || -> io::Result<UdpSocket> { Err(io::ErrorKind::AddrInUse.into()) };
        assert!(matches!(t.attach(&l, a, 17, fails), Err(VerbsError::Io(_))));
        assert!(!t.has_qp(17));
        t.attach(&l, a, 17, placeholder).unwrap();
        assert!(matches!(
            t.attach(&l, b, 17, placeholder),
            Err(VerbsError::ExceedsDeviceLimit { limit: 1, .. })
        ));
        let changes = t.detach_all(17);
        assert!(matches!(changes.as_slice(), [GroupChange::Leave(x)] if *x == a));
        assert!(!t.has_qp(17));
    }
}
