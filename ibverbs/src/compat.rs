//! The exported conversions between libibverbs' structs and the kernel's uverbs ABI
//! (rdma-core's `marshall.c`, IBVERBS_1.0): librdmacm and older providers call them to read
//! what the kernel's RDMA CM returns. They are plain field copies, so they work the same on
//! softroce as on any device. A NULL argument is ignored (rdma-core would crash).

use crate::ffi::{
    ib_user_path_rec, ib_uverbs_ah_attr, ib_uverbs_qp_attr, ibv_ah_attr, ibv_qp_attr,
    ibv_sa_path_rec,
};

fn ah_attr_from_kern(src: &ib_uverbs_ah_attr) -> ibv_ah_attr {
    let mut dst = ibv_ah_attr::default();
    dst.grh.dgid = src.grh.dgid;
    dst.grh.flow_label = src.grh.flow_label;
    dst.grh.sgid_index = src.grh.sgid_index;
    dst.grh.hop_limit = src.grh.hop_limit;
    dst.grh.traffic_class = src.grh.traffic_class;
    dst.dlid = src.dlid;
    dst.sl = src.sl;
    dst.src_path_bits = src.src_path_bits;
    dst.static_rate = src.static_rate;
    dst.is_global = src.is_global;
    dst.port_num = src.port_num;
    dst
}

/// `ibv_copy_ah_attr_from_kern`: `dst` from the kernel's `ib_uverbs_ah_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_ah_attr_from_kern(
    dst: *mut ibv_ah_attr,
    src: *const ib_uverbs_ah_attr,
) {
    if dst.is_null() || src.is_null() {
        return;
    }
    // SAFETY: the caller passes a readable kernel struct and a writable ibv_ah_attr (checked
    // non-NULL above); both are plain data, any bit pattern is valid.
    unsafe { dst.write(ah_attr_from_kern(&*src)) };
}

/// `ibv_copy_qp_attr_from_kern`: every field of `dst` but `qp_state` and `rate_limit` (which
/// rdma-core leaves as they were) from the kernel's `ib_uverbs_qp_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_qp_attr_from_kern(
    dst: *mut ibv_qp_attr,
    src: *const ib_uverbs_qp_attr,
) {
    if dst.is_null() || src.is_null() {
        return;
    }
    // SAFETY: as in ibv_copy_ah_attr_from_kern; `dst` is read-modify-written because two of
    // its fields keep their values.
    let (d, s) = unsafe { (&mut *dst, &*src) };
    d.cur_qp_state = s.cur_qp_state;
    d.path_mtu = s.path_mtu;
    d.path_mig_state = s.path_mig_state;
    d.qkey = s.qkey;
    d.rq_psn = s.rq_psn;
    d.sq_psn = s.sq_psn;
    d.dest_qp_num = s.dest_qp_num;
    d.qp_access_flags = s.qp_access_flags;
    d.cap.max_send_wr = s.max_send_wr;
    d.cap.max_recv_wr = s.max_recv_wr;
    d.cap.max_send_sge = s.max_send_sge;
    d.cap.max_recv_sge = s.max_recv_sge;
    d.cap.max_inline_data = s.max_inline_data;
    d.ah_attr = ah_attr_from_kern(&s.ah_attr);
    d.alt_ah_attr = ah_attr_from_kern(&s.alt_ah_attr);
    d.pkey_index = s.pkey_index;
    d.alt_pkey_index = s.alt_pkey_index;
    d.en_sqd_async_notify = s.en_sqd_async_notify;
    d.sq_draining = s.sq_draining;
    d.max_rd_atomic = s.max_rd_atomic;
    d.max_dest_rd_atomic = s.max_dest_rd_atomic;
    d.min_rnr_timer = s.min_rnr_timer;
    d.port_num = s.port_num;
    d.timeout = s.timeout;
    d.retry_cnt = s.retry_cnt;
    d.rnr_retry = s.rnr_retry;
    d.alt_port_num = s.alt_port_num;
    d.alt_timeout = s.alt_timeout;
}

/// Copies the fields that `ibv_sa_path_rec` and `ib_user_path_rec` share (all of them, some
/// of different integer width: rdma-core assigns them, truncating the kernel's `u32`s to the
/// `u8` and `int` fields the same way).
macro_rules! copy_path_rec {
    ($d:expr, $s:expr) => {{
        $d.dgid = $s.dgid;
        $d.sgid = $s.sgid;
        $d.dlid = $s.dlid;
        $d.slid = $s.slid;
        $d.raw_traffic = $s.raw_traffic as _;
        $d.flow_label = $s.flow_label;
        $d.hop_limit = $s.hop_limit;
        $d.traffic_class = $s.traffic_class;
        $d.reversible = $s.reversible as _;
        $d.numb_path = $s.numb_path;
        $d.pkey = $s.pkey;
        $d.sl = $s.sl;
        $d.mtu_selector = $s.mtu_selector;
        $d.mtu = $s.mtu as _;
        $d.rate_selector = $s.rate_selector;
        $d.rate = $s.rate;
        $d.packet_life_time = $s.packet_life_time;
        $d.preference = $s.preference;
        $d.packet_life_time_selector = $s.packet_life_time_selector;
    }};
}

/// `ibv_copy_path_rec_from_kern`: an SA path record from the kernel's `ib_user_path_rec`.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_path_rec_from_kern(
    dst: *mut ibv_sa_path_rec,
    src: *const ib_user_path_rec,
) {
    if dst.is_null() || src.is_null() {
        return;
    }
    // SAFETY: the caller passes a readable source and a writable destination (non-NULL,
    // checked); plain data.
    let (d, s) = unsafe { (&mut *dst, &*src) };
    copy_path_rec!(d, s);
}

/// `ibv_copy_path_rec_to_kern`: the kernel's `ib_user_path_rec` from an SA path record.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_path_rec_to_kern(
    dst: *mut ib_user_path_rec,
    src: *const ibv_sa_path_rec,
) {
    if dst.is_null() || src.is_null() {
        return;
    }
    // SAFETY: as in ibv_copy_path_rec_from_kern.
    let (d, s) = unsafe { (&mut *dst, &*src) };
    copy_path_rec!(d, s);
}
