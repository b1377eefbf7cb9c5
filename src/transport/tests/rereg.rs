//! A receive WQE's regions are checked again where its data lands (spec-notes/beyond-rxe.md
//! rule 5): a region `ibv_rereg_mr` gave other memory or another PD, or one deregistered,
//! since the receive was posted fails it as rxe's copy_data and mlx5 fail it at execution
//! (the receive completes with a local QP operation error, the sender learns a remote
//! operational error), while new rights that still grant LOCAL_WRITE leave it landing; a
//! receive naming another PD's region is accepted at post for that.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::memory::SharedBytes;

const NEW_IOVA: u64 = 0x5000_0000_0000;

/// B posts a receive of its region's first 4096 bytes (wr_id 9), `change` alters B's key
/// table, then A sends 100 bytes (wr_id 10). A's and B's completion statuses.
fn send_after(change: impl FnOnce(&mut Pair)) -> (WcStatus, WcStatus) {
    let mut p = Pair::new(Mtu::Mtu1024);
    let rsg = [sge(&p.b, 0, 4096)];
    p.b.qp
        .post_recv(
            &RecvWr {
                wr_id: 9,
                sg_list: &rsg,
            },
            &p.b.mrs,
        )
        .unwrap();
    change(&mut p);
    send_from_a(&mut p)
}

/// A sends 100 bytes (wr_id 10) into B's receive (wr_id 9): A's and B's completion statuses.
fn send_from_a(p: &mut Pair) -> (WcStatus, WcStatus) {
    let sg = [sge(&p.a, 0, 100)];
    let wr = SendWr {
        wr_id: 10,
        sg_list: &sg,
        opcode: WrOpcode::Send,
        send_flags: SendFlags::SIGNALED,
    };
    p.a.qp.post_send(&wr, &p.a.mrs).unwrap();
    p.drive_for(Duration::from_millis(50));
    assert_eq!(p.a.send_wcs[0].wr_id, 10);
    assert_eq!(p.b.recv_wcs[0].wr_id, 9);
    (p.a.send_wcs[0].status, p.b.recv_wcs[0].status)
}

fn access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE
}

#[test]
fn an_unchanged_region_takes_the_send() {
    assert_eq!(send_after(|_| {}), (WcStatus::Success, WcStatus::Success));
}

#[test]
fn a_receive_posted_before_its_region_got_other_memory_fails() {
    let r = send_after(|p| {
        let storage = Arc::new(SharedBytes::new(8192));
        let lkey = p.b.mr.lkey;
        p.b.mrs
            .replace(lkey, 1, storage, NEW_IOVA, access())
            .unwrap();
    });
    assert_eq!(r, (WcStatus::RemOpErr, WcStatus::LocQpOpErr));
}

#[test]
fn a_receive_posted_before_its_region_moved_to_another_pd_fails() {
    let r = send_after(|p| {
        let (lkey, storage) = (p.b.mr.lkey, Arc::clone(&p.b.mr.storage));
        p.b.mrs.replace(lkey, 2, storage, IOVA, access()).unwrap();
    });
    assert_eq!(r, (WcStatus::RemOpErr, WcStatus::LocQpOpErr));
}

#[test]
fn a_receive_posted_before_a_change_of_rights_only_still_lands() {
    // The same memory and PD, new rights that still include LOCAL_WRITE: the key, looked up
    // again where the data lands, grants what the receive needs.
    let r = send_after(|p| {
        let (lkey, storage) = (p.b.mr.lkey, Arc::clone(&p.b.mr.storage));
        p.b.mrs.replace(lkey, 1, storage, IOVA, access()).unwrap();
    });
    assert_eq!(r, (WcStatus::Success, WcStatus::Success));
}

#[test]
fn a_receive_posted_before_its_key_lost_local_write_fails() {
    let r = send_after(|p| {
        let (lkey, storage) = (p.b.mr.lkey, Arc::clone(&p.b.mr.storage));
        p.b.mrs
            .replace(lkey, 1, storage, IOVA, AccessFlags::EMPTY)
            .unwrap();
    });
    assert_eq!(r, (WcStatus::RemOpErr, WcStatus::LocQpOpErr));
}

#[test]
fn a_receive_whose_region_was_deregistered_fails() {
    let r = send_after(|p| {
        let lkey = p.b.mr.lkey;
        p.b.mrs.deregister(lkey).unwrap();
    });
    assert_eq!(r, (WcStatus::RemOpErr, WcStatus::LocQpOpErr));
}

#[test]
fn a_receive_of_another_pds_region_is_posted_and_fails_where_the_data_lands() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let other =
        p.b.mrs
            .register(2, Arc::new(SharedBytes::new(4096)), NEW_IOVA, access())
            .unwrap();
    let rsg = [Sge {
        addr: NEW_IOVA,
        length: 4096,
        lkey: other.lkey,
    }];
    let recv = RecvWr {
        wr_id: 9,
        sg_list: &rsg,
    };
    p.b.qp.post_recv(&recv, &p.b.mrs).unwrap();
    // Keys, bounds and rights are still checked at post.
    let outside = [Sge {
        length: 4097,
        ..rsg[0]
    }];
    let bad = RecvWr {
        wr_id: 8,
        sg_list: &outside,
    };
    assert!(p.b.qp.post_recv(&bad, &p.b.mrs).is_err());
    assert_eq!(
        send_from_a(&mut p),
        (WcStatus::RemOpErr, WcStatus::LocQpOpErr)
    );
    assert_eq!(p.b.qp.state(), QpState::Err);
}
