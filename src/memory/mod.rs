//! Memory that RDMA operations target: shared storage ([`region`]) under the memory regions
//! of the verbs API, either owned by softroce or the application's own memory behind the
//! libibverbs shim ([`foreign`], the one module that hands out pointers it did not allocate,
//! accessed only through [`guard`]); [`mapping`] checks the application's memory when it is
//! registered.
//!
//! # Memory model
//!
//! One rule for both kinds of memory, so that the engine is free of data races whatever the
//! application and the peer do:
//!
//! 1. **Every access the engine makes is atomic.** For owned memory, on a whole aligned 8-byte
//!    word: data is copied with relaxed `AtomicU64` loads and stores; a copy that covers part
//!    of a word merges its bytes with a relaxed compare-exchange; the RDMA atomics (CmpSwap,
//!    FetchAdd, ATOMIC WRITE) are `AtomicU64` read-modify-writes or stores with
//!    acquire/release order. No access has another size, and nothing is read or written with
//!    plain loads, stores or `memcpy`, so engine threads never race with each other (two RDMA
//!    WRITEs into the same bytes, a WRITE beside an atomic), and atomic and non-atomic
//!    accesses are never mixed on the engine's side. The application's memory is reached only
//!    through [`guard`]'s assembly routines, outside Rust's abstract machine as the kernel's
//!    copies are (rule 4): a copy is the processor's string move, whose loads and stores are
//!    byte-sized (a byte-wise atomic copy, which touches no byte outside its range), and each
//!    RDMA atomic is one aligned 8-byte `lock` or `mov` instruction, what `AtomicU64`'s
//!    operations are. The routines also return an error, never a SIGSEGV, when the memory is
//!    not there (rule 5).
//! 2. **Ordering with the application comes from the completion.** The engine finishes its
//!    accesses for a work request before it pushes the completion under the CQ's mutex, and
//!    the application polls under that mutex, so the engine's copy happens-before whatever
//!    the application does after the poll; in the other direction, the application's writes
//!    to a buffer happen-before the post that hands it over (the post takes the QP's send
//!    queue lock, which the engine takes before it reads the buffer). That is the verbs
//!    contract: a buffer is the engine's between post and completion.
//! 3. **What the application does outside that contract is its own race, as on an HCA.** A C
//!    program that reads a buffer while a peer RDMA-WRITEs it (ib_write_lat polls a byte
//!    that way), or writes a region a peer reads, races with the engine's atomic accesses; the
//!    engine's side of that race is atomic, so it neither tears its own words nor breaks
//!    Rust's rules, and what the program sees is what it would see from a NIC's DMA: some mix
//!    of old and new bytes. Safe Rust code cannot race at all: owned memory is reachable only
//!    through [`SharedBytes`], whose every access is atomic.
//!
//! 4. **The one exception is the kernel's copy out of a region on transmit**, where a device
//!    gathers (`SOFTROCE_GATHER=1`; off by default, BENCHMARKS.md says why). An RC packet's
//!    payload is then not copied into a transmit buffer: sendmmsg(2) gets an iovec that points at
//!    the bytes in the region ([`SharedBytes::pin`]), and the kernel copies them into the
//!    socket buffer with its own plain `copy_from_user`, while the ICRC was computed by the
//!    engine over the same bytes with its own accesses ([`SharedBytes::crc`]). The kernel is
//!    outside Rust's abstract machine: its read is as a NIC's DMA read, or as rxe's
//!    `copy_data` (a plain `memcpy` out of the user's pages, under exactly the same
//!    concurrency: the application and RDMA WRITEs from other QPs may store into the region
//!    meanwhile). It never writes, so no engine access can tear or lose, and the engine's
//!    own accesses stay atomic. Whether it reads what the CRC covered follows rule 2: the
//!    buffer is the engine's from post to completion, and an RC send completes only on an
//!    acknowledgement, which comes after the packet left (the engine gathers only for RC; a
//!    UC or UD send completes as its last packet is built, before the send call). If an
//!    application breaks that contract, or a retransmission sits in the batch while the
//!    first copy's acknowledgement completes the request, the kernel may send bytes the ICRC
//!    does not cover: the peer drops the packet as corrupt (`icrc_err`), as it would drop any
//!    corrupted packet, and for a retransmission of something already acknowledged nothing
//!    is lost. [`Pinned`] keeps application memory from being taken back during the call.
//!    A gathered page the application has unmapped meanwhile makes the send fail with EFAULT
//!    (the packet is lost and counted) and the ICRC's read fail (the ICRC is left zero).
//! 5. **Application memory may go away while it is registered.** rxe pins a region's pages;
//!    softroce cannot, and an application may unmap or `mprotect` memory it registered. An
//!    access that then finds no page, or no permission, fails with [`AccessError::Fault`]
//!    ([`guard`]) and the transport answers it as an on-demand-paging device answers an access
//!    it cannot resolve: a remote access error NAK for a peer's WRITE, READ or atomic, a local
//!    protection error for the application's own send, a remote operational error for a
//!    receive buffer (spec-notes/memory-placement.md rule 15).
//!
//! The inline-data buffer of the shim (a region of its own) follows rule 2: the shim writes it
//! with plain copies under the QP's inline mutex and keeps the mutex until the post has copied
//! the data out, on the same thread.

pub mod crc;
mod error;
pub mod foreign;
pub mod guard;
pub mod mapping;
pub mod region;

pub use region::{AccessError, Pinned, SharedBytes};
