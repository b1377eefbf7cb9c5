//! The layout table `tests/layout.rs` compares with the C compiler's.

use libc::c_void;

use super::*;

/// The layouts the `ffi` structs assert, as (`sizeof T`, size), (`alignof T`, alignment) and
/// (`T.field`, offset), for the C comparison test.
pub fn layout_table() -> Vec<(String, usize)> {
    use core::mem::{align_of, offset_of, size_of};
    let mut v: Vec<(String, usize)> = Vec::new();
    macro_rules! size {
        ($($t:ident),*) => { $(
            v.push((format!("sizeof {}", stringify!($t)), size_of::<$t>()));
            v.push((format!("alignof {}", stringify!($t)), align_of::<$t>()));
        )* };
    }
    macro_rules! off {
        ($t:ident: $($f:ident),*) => { $( v.push((format!("{}.{}", stringify!($t), stringify!($f)), offset_of!($t, $f))); )* };
    }
    size!(
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
        ibv_values_ex
    );
    off!(ibv_alloc_dm_attr: length, log_align_req, comp_mask);
    off!(ibv_dm: context, memcpy_to_dm, memcpy_from_dm, comp_mask, handle);
    off!(ibv_td: context);
    off!(ibv_td_init_attr: comp_mask);
    off!(ibv_parent_domain_init_attr: pd, td, comp_mask, alloc, free, pd_context);
    off!(ibv_values_ex: comp_mask, raw_clock);
    off!(ibv_device: node_type, transport_type, name, dev_name, dev_path, ibdev_path);
    off!(ibv_context_ops: alloc_mw, bind_mw, dealloc_mw, poll_cq, req_notify_cq, post_srq_recv, post_send, post_recv);
    off!(ibv_context: device, ops, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat);
    off!(verbs_context: sz, context);
    off!(ibv_pd: context, handle);
    off!(ibv_mr: context, pd, addr, length, handle, lkey, rkey);
    off!(ibv_mw: context, pd, rkey, handle);
    v.push(("ibv_mw.type".into(), offset_of!(ibv_mw, type_)));
    off!(ibv_mw_bind_info: mr, addr, length, mw_access_flags);
    off!(ibv_mw_bind: wr_id, send_flags, bind_info);
    off!(ibv_comp_channel: context, fd, refcnt);
    off!(ibv_cq: context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed, async_events_completed);
    off!(ibv_qp: context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state, qp_type, mutex, cond, events_completed);
    off!(ibv_wc: wr_id, status, opcode, vendor_err, byte_len, imm_data, qp_num, src_qp, wc_flags, pkey_index, slid, sl, dlid_path_bits);
    off!(ibv_sge: addr, length, lkey);
    off!(ibv_send_wr: wr_id, next, sg_list, num_sge, opcode, send_flags, imm_data, wr, qp_type, bind_mw);
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
    off!(ibv_recv_wr: wr_id, next, sg_list, num_sge);
    off!(ibv_qp_init_attr: qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all);
    off!(ibv_global_route: dgid, flow_label, sgid_index, hop_limit, traffic_class);
    off!(ibv_ah_attr: grh, dlid, sl, src_path_bits, static_rate, is_global, port_num);
    off!(ibv_qp_attr: qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn, dest_qp_num, qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index, alt_pkey_index, en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout, rate_limit);
    off!(ibv_port_attr: state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz, bad_pkey_cntr, qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl, subnet_timeout, init_type_reply, active_width, active_speed, phys_state, link_layer, flags, port_cap_flags2);
    off!(ibv_device_attr: fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id, vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd, max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom, max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee, max_rdd, max_mw, max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach, max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq, max_srq_wr, max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt);
    off!(ibv_srq: context, srq_context, pd, handle, mutex, cond, events_completed);
    off!(ibv_srq_attr: max_wr, max_sge, srq_limit);
    off!(ibv_srq_init_attr: srq_context, attr);
    off!(ibv_ah: context, pd, handle);
    off!(ibv_grh: version_tclass_flow, paylen, next_hdr, hop_limit, sgid, dgid);
    off!(ibv_async_event: element, event_type);
    // verbs_context.ops is one array here; the C side names the members.
    let slot = size_of::<*mut c_void>();
    v.push(("verbs_context.query_port".into(), VCTX_QUERY_PORT * slot));
    v.push((
        "verbs_context.query_device_ex".into(),
        VCTX_QUERY_DEVICE_EX * slot,
    ));
    v.push((
        "verbs_context.create_cq_ex".into(),
        VCTX_CREATE_CQ_EX * slot,
    ));
    v.push((
        "verbs_context.create_qp_ex".into(),
        VCTX_CREATE_QP_EX * slot,
    ));
    for (name, at) in [
        ("advise_mr", VCTX_ADVISE_MR),
        ("reg_dm_mr", VCTX_REG_DM_MR),
        ("alloc_dm", VCTX_ALLOC_DM),
        ("free_dm", VCTX_FREE_DM),
        ("alloc_parent_domain", VCTX_ALLOC_PARENT_DOMAIN),
        ("dealloc_td", VCTX_DEALLOC_TD),
        ("alloc_td", VCTX_ALLOC_TD),
        ("query_rt_values", VCTX_QUERY_RT_VALUES),
    ] {
        v.push((format!("verbs_context.{name}"), at * slot));
    }
    // `cq` and `qp_base` hold the base struct's fields, which C spells out (ibv_cq_ex) or
    // names qp_base (ibv_qp_ex): the members after them are checked by name.
    off!(ibv_cq_init_attr_ex: cqe, cq_context, channel, comp_vector, wc_flags, comp_mask, flags, parent_domain);
    off!(ibv_poll_cq_attr: comp_mask);
    off!(ibv_cq_ex: comp_mask, status, wr_id, start_poll, next_poll, end_poll, read_opcode, read_vendor_err, read_byte_len, read_imm_data, read_qp_num, read_src_qp, read_wc_flags, read_slid, read_sl, read_dlid_path_bits, read_completion_ts, read_cvlan, read_flow_tag, read_tm_info, read_completion_wallclock_ns);
    off!(ibv_rx_hash_conf: rx_hash_function, rx_hash_key_len, rx_hash_key, rx_hash_fields_mask);
    off!(ibv_qp_init_attr_ex: qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all, comp_mask, pd, xrcd, create_flags, max_tso_header, rwq_ind_tbl, rx_hash_conf, source_qpn, send_ops_flags);
    off!(ibv_data_buf: addr, length);
    off!(ibv_qp_ex: qp_base, comp_mask, wr_id, wr_flags, wr_atomic_cmp_swp, wr_atomic_fetch_add, wr_bind_mw, wr_local_inv, wr_rdma_read, wr_rdma_write, wr_rdma_write_imm, wr_send, wr_send_imm, wr_send_inv, wr_send_tso, wr_set_ud_addr, wr_set_xrc_srqn, wr_set_inline_data, wr_set_inline_data_list, wr_set_sge, wr_set_sge_list, wr_start, wr_complete, wr_abort, wr_atomic_write);
    v.push((
        "ibv_cq_ex.async_events_completed".into(),
        offset_of!(ibv_cq_ex, cq) + offset_of!(ibv_cq, async_events_completed),
    ));
    // Declared with the GID queries (objects.rs), checked here with the others.
    use crate::ibv_gid_entry;
    size!(ibv_gid_entry);
    off!(ibv_gid_entry: gid, gid_index, port_num, gid_type, ndev_ifindex);
    off!(ibv_query_device_ex_input: comp_mask);
    off!(ibv_odp_caps: general_caps, per_transport_caps);
    off!(ibv_tso_caps: max_tso, supported_qpts);
    off!(ibv_rss_caps: supported_qpts, max_rwq_indirection_tables, max_rwq_indirection_table_size, rx_hash_fields_mask, rx_hash_function);
    off!(ibv_packet_pacing_caps: qp_rate_limit_min, qp_rate_limit_max, supported_qpts);
    off!(ibv_tm_caps: max_rndv_hdr_size, max_num_tags, flags, max_ops, max_sge);
    off!(ibv_cq_moderation_caps: max_cq_count, max_cq_period);
    off!(ibv_pci_atomic_caps: fetch_add, swap, compare_swap);
    off!(ibv_device_attr_ex: orig_attr, comp_mask, odp_caps, completion_timestamp_mask, hca_core_clock, device_cap_flags_ex, tso_caps, rss_caps, max_wq_type_rq, packet_pacing_caps, raw_packet_caps, tm_caps, cq_mod_caps, max_dm_size, pci_atomic_caps, xrc_odp_caps, phys_port_cnt_ex);
    off!(ibv_sa_path_rec: dgid, sgid, dlid, slid, raw_traffic, flow_label, hop_limit, traffic_class, reversible, numb_path, pkey, sl, mtu_selector, mtu, rate_selector, rate, packet_life_time_selector, packet_life_time, preference);
    off!(ib_user_path_rec: dgid, sgid, dlid, slid, raw_traffic, flow_label, reversible, mtu, pkey, hop_limit, traffic_class, numb_path, sl, mtu_selector, rate_selector, rate, packet_life_time_selector, packet_life_time, preference);
    off!(ib_uverbs_global_route: dgid, flow_label, sgid_index, hop_limit, traffic_class, reserved);
    off!(ib_uverbs_ah_attr: grh, dlid, sl, src_path_bits, static_rate, is_global, port_num, reserved);
    off!(ib_uverbs_qp_attr: qp_attr_mask, qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn, dest_qp_num, qp_access_flags, ah_attr, alt_ah_attr, max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data, pkey_index, alt_pkey_index, en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout, reserved);
    v
}
