//! The process's rsockets by their int handle. The handle is the fd of the rsocket's own
//! rdma_cm event channel, as in rdma-core (`rs_insert(rs, rs->cm_id->channel->fd)`): a real
//! descriptor the kernel will not hand out twice while the rsocket lives, which librspreload
//! maps its fake socket onto (`fd_open`/`fd_store`), and which poll()/select() accept. Its
//! readiness is the CM's (events queued), not the data's: rpoll maps data readiness itself.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use libc::c_int;

use super::stream::Rs;

static TABLE: Mutex<Option<HashMap<c_int, Arc<Rs>>>> = Mutex::new(None);

/// The rsocket of `fd`, if it is one.
pub(super) fn lookup(fd: c_int) -> Option<Arc<Rs>> {
    super::super::error::lock(&TABLE)
        .as_ref()?
        .get(&fd)
        .cloned()
}

/// Records a new rsocket under its handle.
pub(super) fn insert(rs: Arc<Rs>) {
    super::super::error::lock(&TABLE)
        .get_or_insert_with(HashMap::new)
        .insert(rs.fd, rs);
}

/// Forgets the rsocket of `fd`, returning it.
pub(super) fn remove(fd: c_int) -> Option<Arc<Rs>> {
    super::super::error::lock(&TABLE).as_mut()?.remove(&fd)
}

/// Every rsocket of the process.
pub(super) fn all() -> Vec<Arc<Rs>> {
    super::super::error::lock(&TABLE)
        .as_ref()
        .map(|t| t.values().cloned().collect())
        .unwrap_or_default()
}
