//! rsockets: the socket API librdmacm carries over RDMA connections. So far only the
//! protocol's byte encodings (`proto`); the exports are still refused with ENOSYS in
//! `refused.rs` (issue 37).

#[allow(dead_code)] // used by the socket state machine still to come (issue 37)
pub(crate) mod proto;
#[allow(dead_code)] // used by the socket state machine still to come (issue 37)
pub(crate) mod ring;
