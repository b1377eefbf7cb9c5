//! Address handles (UD).

use std::ptr::null_mut;
use std::sync::Arc;

use libc::{c_int, EINVAL};
use softroce::ib::{AhAttr, Gid};
use softroce::verbs::AddressHandle;

use super::common::{errno_of, fail, fail_neg, fail_null, PORT};
use super::ctx::ctx_of;
use super::handle::{self, Obj, Object};
use super::pd::{pd_of, Pd};
use crate::ffi::*;

/// An address handle; it holds its PD.
pub(super) struct Ah {
    pub(super) ah: AddressHandle,
    _pd: Arc<Obj<Pd>>,
}

impl Object for Ah {
    type C = ibv_ah;
    type Handle = ibv_ah;
}

/// `ibv_create_ah`: NULL and errno on failure (EINVAL without a GRH, which RoCE needs, or for
/// a GID of another family or outside the table).
#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    let Some(pdr) = pd_of(pd) else {
        return fail_null(EINVAL);
    };
    if attr.is_null() {
        return fail_null(EINVAL);
    }
    // SAFETY: non-null, and the caller passes a readable ibv_ah_attr.
    let a = unsafe { *attr };
    if a.is_global == 0 || (a.port_num != PORT && a.port_num != 0) {
        return fail_null(EINVAL);
    }
    let ah = match pdr.pd.create_ah(&AhAttr {
        dgid: Gid(a.grh.dgid),
        sgid_index: a.grh.sgid_index,
        hop_limit: a.grh.hop_limit,
        traffic_class: a.grh.traffic_class,
        flow_label: a.grh.flow_label,
        sl: a.sl,
    }) {
        Ok(x) => x,
        Err(e) => return fail_null(errno_of(&e)),
    };
    let obj = Obj::new(
        ibv_ah {
            context: pdr.context(),
            pd,
            handle: 0,
        },
        Ah { ah, _pd: pdr },
    );
    handle::publish(&obj)
}

/// `ibv_destroy_ah`: 0 or an errno value (EBUSY while a call on another thread uses it).
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_ah(p: *mut ibv_ah) -> c_int {
    match handle::remove::<Ah>(p) {
        Ok(ah) => {
            drop(ah);
            0
        }
        Err(e) => fail(e),
    }
}

/// `ibv_init_ah_from_wc`: the address vector back to the sender of a received datagram (its
/// GID from the GRH area, our GID index 1, hop limit 0xFF as libibverbs sets); 0, or -1 and
/// errno (EINVAL without a GRH).
#[no_mangle]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    c: *mut ibv_context,
    port: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    attr: *mut ibv_ah_attr,
) -> c_int {
    if ctx_of(c).is_none() || port != PORT || wc.is_null() || grh.is_null() || attr.is_null() {
        return fail_neg(EINVAL);
    }
    // SAFETY: non-null (checked above); the caller passes a completion and its receive
    // buffer's GRH area.
    let (w, g) = unsafe { (*wc, *grh) };
    if w.wc_flags & IBV_WC_GRH == 0 {
        return fail_neg(EINVAL);
    }
    let flow = u32::from_be(g.version_tclass_flow);
    // RoCEv2 over IPv4 (as rxe): the GRH area's last 20 bytes are the IPv4 header, the first
    // 20 zero; the sender is its source address, IPv4-mapped, its class the TOS
    // (libibverbs' ibv_init_ah_from_wc does the same).
    // SAFETY: ibv_grh is 40 plain bytes; `g` is a local copy.
    let raw: [u8; 40] = unsafe { std::mem::transmute(g) };
    let (dgid, flow) = if raw[..20].iter().all(|&b| b == 0) && raw[20] == 0x45 {
        let mut gid = [0u8; 16];
        gid[10..12].copy_from_slice(&[0xff, 0xff]);
        gid[12..].copy_from_slice(&raw[32..36]);
        (gid, u32::from(raw[21]) << 20)
    } else {
        (g.sgid, flow)
    };
    let a = ibv_ah_attr {
        grh: ibv_global_route {
            dgid,
            flow_label: flow & 0xf_ffff,
            sgid_index: 1,
            hop_limit: 0xff,
            traffic_class: (flow >> 20) as u8,
        },
        dlid: 0,
        sl: w.sl,
        src_path_bits: 0,
        static_rate: 0,
        is_global: 1,
        port_num: port,
    };
    // SAFETY: the caller passes a writable ibv_ah_attr.
    unsafe { attr.write(a) };
    0
}

/// `ibv_create_ah_from_wc`: `ibv_init_ah_from_wc` then `ibv_create_ah`; NULL and errno.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port: u8,
) -> *mut ibv_ah {
    let Some(pdr) = pd_of(pd) else {
        return fail_null(EINVAL);
    };
    let mut a = ibv_ah_attr::default();
    // SAFETY: forwarded with the PD's (live) context; `a` is a local.
    if unsafe { ibv_init_ah_from_wc(pdr.context(), port, wc, grh, &mut a) } != 0 {
        return null_mut(); // errno set by ibv_init_ah_from_wc
    }
    // SAFETY: `a` is a local.
    unsafe { ibv_create_ah(pd, &mut a) }
}
