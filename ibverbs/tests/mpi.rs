//! Debian's OpenMPI (pml ucx, UCX 1.13) on softroce: tests/mpi/pingpong.c (ping-pong latency,
//! 1 MiB bandwidth messages checked byte by byte, an allreduce whose sum every rank checks)
//! with 2 and 4 ranks, each rank under `softroce run` on its own loopback address and
//! UCX_TLS=rc_verbs,ud_verbs. That no shared memory carried the data is shown twice: UCX's
//! endpoint configurations name only the verbs transports on softroce0:1, and a capture of
//! RoCEv2 (UDP 4791) between the ranks' addresses holds at least every bandwidth byte that
//! rank 0 sent to rank 1. OpenMPI's own out-of-band TCP stays on lo; `--mca btl self` keeps
//! its shared-memory BTL (vader) out. Every run has a deadline.

mod common;

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{program, shim_lib, target_dir, wait_for};

/// The runs share 2 cores: one at a time, so that neither starves the other's deadline.
static SERIAL: Mutex<()> = Mutex::new(());

/// Bandwidth messages rank 0 sends (1 MiB each).
const BW_N: u64 = 20;
const MIB: u64 = 1 << 20;

fn softroce() -> PathBuf {
    let p = target_dir().join("softroce");
    assert!(
        p.is_file(),
        "{} not built: run cargo test from the workspace root",
        p.display()
    );
    p
}

/// A scratch directory of this test process.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("softroce-mpi-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// tests/mpi/pingpong.c built with mpicc.
fn mpi_program(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/mpi/pingpong.c");
    let out = dir.join("pingpong");
    let o = Command::new(program("mpicc", "libopenmpi-dev"))
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&out)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "mpicc: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// How the ranks' devices are addressed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Addresses {
    /// Every rank on `prefix.10`: one device for the host, as rxe0 (a cluster node has one
    /// NIC address).
    One,
    /// Rank r on `prefix.(10 + r)`.
    PerRank,
}

/// The wrapper mpirun starts per rank: the rank's program under `softroce run`, bound as
/// `addresses` says.
fn rank_wrapper(dir: &Path, prefix: &str, addresses: Addresses) -> PathBuf {
    let w = dir.join("rank.sh");
    let host = match addresses {
        Addresses::One => "10".to_string(),
        Addresses::PerRank => "$((10 + OMPI_COMM_WORLD_RANK))".to_string(),
    };
    let text = format!(
        "#!/bin/sh\nexec '{}' run --lib '{}' --bind {prefix}.{host} -- \"$@\"\n",
        softroce().display(),
        shim_lib().display()
    );
    std::fs::write(&w, text).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&w, std::fs::Permissions::from_mode(0o755)).unwrap();
    w
}

/// dumpcap on lo for RoCEv2 to and from `net` (a /24), as classic pcap; returns once it
/// captures (it says so on stderr).
struct Capture {
    child: std::process::Child,
    file: PathBuf,
}

impl Capture {
    fn start(dir: &Path, net: &str) -> Capture {
        let file = dir.join("roce.pcap");
        let err = dir.join("dumpcap.err");
        let child = Command::new(program("dumpcap", "tshark"))
            // A 64 MiB kernel buffer: under load the default one drops frames.
            .args(["-q", "-P", "-B", "64", "-i", "lo", "-f"])
            .arg(format!("udp port 4791 and net {net}.0/24"))
            .arg("-w")
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !std::fs::read_to_string(&err)
            .unwrap_or_default()
            .contains("Capturing on")
        {
            assert!(
                Instant::now() < deadline,
                "dumpcap did not start: {:?}",
                std::fs::read_to_string(&err)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Capture { child, file }
    }

    /// Stops the capture (SIGINT: dumpcap flushes and exits) and returns the IPv4 bytes
    /// (frame lengths) per (source, destination).
    fn stop(self) -> HashMap<(Ipv4Addr, Ipv4Addr), u64> {
        let Capture { child, file } = self;
        // SAFETY: kill(2) with SIGINT on our own child's pid; no memory is involved.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
        let (_, in_time) = wait_for(child, Duration::from_secs(30));
        assert!(in_time, "dumpcap did not stop");
        bytes_per_pair(&std::fs::read(file).unwrap())
    }
}

/// Sums frame lengths per IPv4 (source, destination) in a classic little-endian pcap of
/// Ethernet frames (what dumpcap -P writes for lo).
fn bytes_per_pair(pcap: &[u8]) -> HashMap<(Ipv4Addr, Ipv4Addr), u64> {
    assert!(pcap.len() >= 24, "capture shorter than its header");
    let u32_at = |o: usize| u32::from_le_bytes(pcap[o..o + 4].try_into().unwrap());
    assert!(
        matches!(u32_at(0), 0xa1b2_c3d4 | 0xa1b2_3c4d),
        "not a little-endian pcap"
    );
    assert_eq!(u32_at(20), 1, "link type is not Ethernet");
    let mut m = HashMap::new();
    let mut o = 24;
    while o + 16 <= pcap.len() {
        let (incl, orig) = (u32_at(o + 8) as usize, u32_at(o + 12) as u64);
        let f = &pcap[o + 16..(o + 16 + incl).min(pcap.len())];
        if f.len() >= 34 && f[12..14] == [0x08, 0x00] {
            let src = Ipv4Addr::new(f[26], f[27], f[28], f[29]);
            let dst = Ipv4Addr::new(f[30], f[31], f[32], f[33]);
            *m.entry((src, dst)).or_insert(0) += orig;
        }
        o += 16 + incl;
    }
    m
}

/// Waits (at most 180 s) for an mpirun of the program on `ranks` ranks, which must exit 0 with
/// every rank's allreduce checked (the sum 1 + 2 + ... + ranks); returns its output.
fn mpirun_passed(child: std::process::Child, ranks: u32, what: &str) -> String {
    let (o, in_time) = wait_for(child, Duration::from_secs(180));
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        in_time && o.status.success(),
        "{what}: {:?}, in time: {in_time}\n{out}",
        o.status
    );
    let want = ranks * (ranks + 1) / 2;
    for r in 0..ranks {
        let line = format!("allreduce ok {want} rank {r} of {ranks}");
        assert!(out.contains(&line), "no '{line}':\n{out}");
    }
    out
}

/// Runs the program on `ranks` ranks bound as `addresses` says in `prefix`.0/24 and checks
/// what the module documentation says.
fn mpi_over_softroce(ranks: u32, prefix: &str, addresses: Addresses) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch(&format!("{ranks}-{prefix}"));
    let prog = mpi_program(&dir);
    let wrapper = rank_wrapper(&dir, prefix, addresses);
    let cap = Capture::start(&dir, prefix);
    let child = Command::new(program("mpirun", "openmpi-bin"))
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "--bind-to",
            "none",
            "-np",
        ])
        .arg(ranks.to_string())
        .args([
            "--mca",
            "oob_tcp_if_include",
            "lo",
            "--mca",
            "btl",
            "self",
            "--mca",
            "pml",
            "ucx",
        ])
        .args([
            "-x",
            "UCX_TLS=rc_verbs,ud_verbs",
            "-x",
            "UCX_NET_DEVICES=softroce0:1",
        ])
        .args(["-x", "UCX_LOG_LEVEL=info"])
        .arg(&wrapper)
        .arg(&prog)
        .args(["200", &BW_N.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = mpirun_passed(child, ranks, &format!("mpirun -np {ranks}"));
    let traffic = cap.stop();
    let figure = |key: &str| -> f64 {
        out.lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {key} figure:\n{out}"))
    };
    assert!(
        figure("latency_us") > 0.0 && figure("bandwidth_MBps") > 0.0,
        "{out}"
    );

    // UCX chose verbs transports on softroce0:1 and nothing else for every endpoint.
    let cfgs: Vec<&str> = out.lines().filter(|l| l.contains("ep_cfg[")).collect();
    assert!(
        !cfgs.is_empty(),
        "UCX printed no endpoint configuration:\n{out}"
    );
    for l in &cfgs {
        assert!(
            l.contains("rc_verbs/softroce0:1") || l.contains("ud_verbs/softroce0:1"),
            "{l}"
        );
        for other in ["posix", "sysv", "cma", "knem", "xpmem", "tcp/", "self/"] {
            assert!(!l.contains(other), "a non-verbs transport in {l}");
        }
    }

    // The bandwidth bytes crossed softroce's wire from rank 0 to rank 1.
    let r0: Ipv4Addr = format!("{prefix}.10").parse().unwrap();
    if addresses == Addresses::One {
        // Every rank's RoCEv2 goes from the one address to itself.
        let sent = traffic.get(&(r0, r0)).copied().unwrap_or(0);
        assert!(
            sent >= BW_N * MIB * 9 / 10,
            "only {sent} bytes of RoCEv2 on {r0} for {BW_N} MiB sent: {traffic:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let r1: Ipv4Addr = format!("{prefix}.11").parse().unwrap();
    // At least 90% of them: on a loaded machine the capture itself may drop a few frames
    // (it missed 0.6% once with 8 runnable threads per core), while a shared-memory path
    // would leave next to nothing on the wire.
    let sent = traffic.get(&(r0, r1)).copied().unwrap_or(0);
    assert!(
        sent >= BW_N * MIB * 9 / 10,
        "only {sent} bytes of RoCEv2 from {r0} to {r1} for {BW_N} MiB sent: {traffic:?}"
    );
    // With more ranks, every rank spoke RoCEv2 (the allreduce) to some other rank.
    for r in 0..ranks {
        let a: Ipv4Addr = format!("{prefix}.{}", 10 + r).parse().unwrap();
        assert!(
            traffic
                .iter()
                .any(|(&(s, d), &n)| s == a && d != a && n > 0),
            "rank {r} ({a}) sent no RoCEv2 to another rank: {traffic:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn openmpi_over_ucx_verbs_two_ranks() {
    mpi_over_softroce(2, "127.0.61", Addresses::PerRank);
}

#[test]
fn openmpi_over_ucx_verbs_four_ranks_on_one_address() {
    mpi_over_softroce(4, "127.0.62", Addresses::One);
}

/// Two hosts of the test's own: network namespaces joined by a veth pair, 198.51.100.1/24 and
/// .2/24 (TEST-NET-2, inside the namespaces only), each with one address and its own hostname.
/// mpirun runs in the first and starts the second's daemon through an rsh agent that enters the
/// second namespace; every rank runs under `softroce run --bind` its host's one address, two
/// ranks per host. The ranks of one host share its device; those of two hosts talk RoCEv2 over
/// the veth.
#[test]
fn openmpi_over_ucx_two_ranks_on_each_of_two_hosts() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("two-hosts");
    let prog = mpi_program(&dir);
    let tag = std::process::id() % 100_000;
    let (na, nb) = (format!("srma{tag}"), format!("srmb{tag}"));
    let agent = dir.join("agent.sh");
    std::fs::write(
        &agent,
        format!(
            "#!/bin/sh\n# plm_rsh_agent: HOST CMD... runs CMD in HOST's namespace.\n\
             host=$1; shift\n\
             case $host in 198.51.100.1) ns={na} ;; 198.51.100.2) ns={nb} ;; *) exit 1 ;; esac\n\
             exec ip netns exec \"$ns\" unshare --uts sh -c \"hostname $ns; $*\"\n"
        ),
    )
    .unwrap();
    let wrapper = dir.join("rank.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n# The rank's host address: its namespace's one global IPv4 address.\n\
             ip=$(ip -o -4 addr show scope global | awk '{{print $4}}' | cut -d/ -f1 | head -n 1)\n\
             exec '{}' run --lib '{}' --bind \"$ip\" -- \"$@\"\n",
            softroce().display(),
            shim_lib().display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    for f in [&agent, &wrapper] {
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let script = format!(
        "set -e\n\
         trap 'ip netns del {na} 2>/dev/null; ip netns del {nb} 2>/dev/null' EXIT\n\
         ip netns add {na}; ip netns add {nb}\n\
         ip link add {na}v type veth peer name {nb}v\n\
         ip link set {na}v netns {na}; ip link set {nb}v netns {nb}\n\
         ip -n {na} addr add 198.51.100.1/24 dev {na}v; ip -n {nb} addr add 198.51.100.2/24 dev {nb}v\n\
         for n in {na} {nb}; do ip -n $n link set lo up; ip -n $n link set ${{n}}v up; done\n\
         set +e\n\
         ip netns exec {na} unshare --uts sh -c \"hostname {na}; exec timeout 150 mpirun \
           --allow-run-as-root --oversubscribe --bind-to none \
           -host 198.51.100.1:2,198.51.100.2:2 -np 4 \
           --mca plm_rsh_agent '{agent}' --mca plm_rsh_no_tree_spawn 1 \
           --mca oob_tcp_if_include {na}v,{nb}v --mca btl self --mca pml ucx \
           -x UCX_TLS=rc_verbs,ud_verbs -x UCX_NET_DEVICES=softroce0:1 -x UCX_LOG_LEVEL=info \
           '{wrapper}' '{prog}' 200 {BW_N}\"\n",
        agent = agent.display(),
        wrapper = wrapper.display(),
        prog = prog.display(),
    );
    let child = Command::new("bash")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = mpirun_passed(child, 4, "mpirun across two hosts");
    // Both hosts' ranks chose rc_verbs on softroce0:1 (UCX names the host in its log lines).
    for host in [&na, &nb] {
        assert!(
            out.lines()
                .any(|l| l.contains(&format!("[{host}:")) && l.contains("rc_verbs/softroce0:1")),
            "no rc_verbs endpoint on {host}:\n{out}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
