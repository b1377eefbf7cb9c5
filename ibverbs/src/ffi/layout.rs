//! The layout table `tests/layout.rs` compares with the C compiler's.

use libc::c_void;

use super::*;

/// A struct declared with `ffi::c_struct!`: its fields' names and offsets, recorded
/// where it is declared, so that the layout table cannot leave one out.
pub trait CLayout {
    /// Each field's name (as declared; a trailing `_` escapes a Rust keyword) and offset.
    const FIELDS: &'static [(&'static str, usize)];
}

/// The declared fields C has no name for, left out of the table; so is every field whose name
/// starts with `_` (padding and reserved slots).
const NOT_IN_C: &[&str] = &[
    // One array here; C names the slots, which the table checks one by one below.
    "verbs_context.ops",
    // The base `ibv_cq`, whose fields `ibv_cq_ex` spells out in C (its last checked below).
    "ibv_cq_ex.cq",
];

/// The layouts the `ffi` structs assert, as (`sizeof T`, size), (`alignof T`, alignment) and
/// (`T.field`, offset), for the C comparison test.
pub fn layout_table() -> Vec<(String, usize)> {
    use core::mem::{align_of, size_of};
    let mut v: Vec<(String, usize)> = Vec::new();
    macro_rules! structs {
        ($($t:ident),*) => { $(
            v.push((format!("sizeof {}", stringify!($t)), size_of::<$t>()));
            v.push((format!("alignof {}", stringify!($t)), align_of::<$t>()));
            for &(f, at) in <$t as CLayout>::FIELDS {
                let name = format!("{}.{}", stringify!($t), f.strip_suffix('_').unwrap_or(f));
                if !f.starts_with('_') && !NOT_IN_C.contains(&name.as_str()) {
                    v.push((name, at));
                }
            }
        )* };
    }
    structs!(
        ibv_device,
        ibv_context_ops,
        ibv_context,
        verbs_context,
        ibv_pd,
        ibv_mr,
        ibv_mw,
        ibv_mw_bind_info,
        ibv_mw_bind,
        ibv_comp_channel,
        ibv_cq,
        ibv_qp,
        ibv_wc,
        ibv_sge,
        ibv_send_wr,
        ibv_recv_wr,
        ibv_qp_cap,
        ibv_qp_init_attr,
        ibv_global_route,
        ibv_ah_attr,
        ibv_qp_attr,
        ibv_port_attr,
        ibv_device_attr,
        ibv_srq,
        ibv_srq_attr,
        ibv_srq_init_attr,
        ibv_ah,
        ibv_grh,
        ibv_async_event,
        ibv_query_device_ex_input,
        ibv_odp_caps,
        ibv_tso_caps,
        ibv_rss_caps,
        ibv_packet_pacing_caps,
        ibv_tm_caps,
        ibv_cq_moderation_caps,
        ibv_pci_atomic_caps,
        ibv_device_attr_ex,
        ibv_sa_path_rec,
        ib_user_path_rec,
        ib_uverbs_global_route,
        ib_uverbs_ah_attr,
        ib_uverbs_qp_attr,
        ibv_cq_init_attr_ex,
        ibv_poll_cq_attr,
        ibv_cq_ex,
        ibv_rx_hash_conf,
        ibv_qp_init_attr_ex,
        ibv_data_buf,
        ibv_qp_ex,
        ibv_alloc_dm_attr,
        ibv_dm,
        ibv_td,
        ibv_td_init_attr,
        ibv_parent_domain_init_attr,
        ibv_values_ex,
        ibv_gid_entry,
        ibv_xrcd,
        ibv_xrcd_init_attr,
        ibv_tm_cap,
        ibv_srq_init_attr_ex,
        ibv_qp_open_attr,
        ibv_ops_wr
    );
    named_members(&mut v);
    v
}

/// The members whose C names the Rust declarations do not carry (a union read by word, an
/// array of ops, a nested base struct), by those names.
fn named_members(v: &mut Vec<(String, usize)>) {
    use core::mem::{offset_of, size_of};
    // The bind_mw members the accessors read (ibv_send_wr::bind_mw_*), by 8-byte word.
    for (f, word) in [
        ("mw", 0),
        ("rkey", 1),
        ("bind_info.mr", 2),
        ("bind_info.addr", 3),
        ("bind_info.length", 4),
        ("bind_info.mw_access_flags", 5),
    ] {
        v.push((
            format!("ibv_send_wr.bind_mw.{f}"),
            offset_of!(ibv_send_wr, bind_mw) + 8 * word,
        ));
    }
    v.push((
        "ibv_send_wr.invalidate_rkey".into(),
        offset_of!(ibv_send_wr, imm_data),
    ));
    // verbs_context.ops is one array here; the C side names the members.
    let slot = size_of::<*mut c_void>();
    for (name, at) in [
        ("query_port", VCTX_QUERY_PORT),
        ("query_device_ex", VCTX_QUERY_DEVICE_EX),
        ("create_cq_ex", VCTX_CREATE_CQ_EX),
        ("create_qp_ex", VCTX_CREATE_QP_EX),
        ("advise_mr", VCTX_ADVISE_MR),
        ("reg_dm_mr", VCTX_REG_DM_MR),
        ("alloc_dm", VCTX_ALLOC_DM),
        ("free_dm", VCTX_FREE_DM),
        ("alloc_parent_domain", VCTX_ALLOC_PARENT_DOMAIN),
        ("dealloc_td", VCTX_DEALLOC_TD),
        ("alloc_td", VCTX_ALLOC_TD),
        ("query_rt_values", VCTX_QUERY_RT_VALUES),
        ("open_qp", VCTX_OPEN_QP),
        ("get_srq_num", VCTX_GET_SRQ_NUM),
        ("create_srq_ex", VCTX_CREATE_SRQ_EX),
        ("open_xrcd", VCTX_OPEN_XRCD),
        ("close_xrcd", VCTX_CLOSE_XRCD),
        ("post_srq_ops", VCTX_POST_SRQ_OPS),
    ] {
        v.push((format!("verbs_context.{name}"), at * slot));
    }
    // ibv_ops_wr's anonymous `tm` struct and its `add`, declared here as named structs.
    let tm = offset_of!(ibv_ops_wr, tm);
    let add = tm + offset_of!(ibv_ops_wr_tm, add);
    for (f, at) in [
        (
            "tm.unexpected_cnt",
            tm + offset_of!(ibv_ops_wr_tm, unexpected_cnt),
        ),
        ("tm.handle", tm + offset_of!(ibv_ops_wr_tm, handle)),
        (
            "tm.add.recv_wr_id",
            add + offset_of!(ibv_ops_wr_tm_add, recv_wr_id),
        ),
        (
            "tm.add.sg_list",
            add + offset_of!(ibv_ops_wr_tm_add, sg_list),
        ),
        (
            "tm.add.num_sge",
            add + offset_of!(ibv_ops_wr_tm_add, num_sge),
        ),
        ("tm.add.tag", add + offset_of!(ibv_ops_wr_tm_add, tag)),
        ("tm.add.mask", add + offset_of!(ibv_ops_wr_tm_add, mask)),
    ] {
        v.push((format!("ibv_ops_wr.{f}"), at));
    }
    // `priv` is a Rust keyword: the field is `priv_`.
    v.push(("ibv_wc_tm_info.tag".into(), offset_of!(ibv_wc_tm_info, tag)));
    v.push((
        "ibv_wc_tm_info.priv".into(),
        offset_of!(ibv_wc_tm_info, priv_),
    ));
    // `ibv_cq_ex.cq` holds the base struct's fields, which C spells out: the last of them, by
    // its C name.
    v.push((
        "ibv_cq_ex.async_events_completed".into(),
        offset_of!(ibv_cq_ex, cq) + offset_of!(ibv_cq, async_events_completed),
    ));
}
