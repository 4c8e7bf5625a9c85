//! Failover figures of the installed controller: the README's install on a
//! sandbox (`agentdeck crds | kubectl apply -f -`, `agentdeck manifests
//! --pools config/pool-quickstart.yaml | kubectl apply -f -`), the
//! controller running as the rendered Deployment's pods (real processes,
//! 15 s Lease, 2 s retry), and:
//!
//! 1. SIGTERM of the leading pod's process → a successor holds the Lease
//!    (the standby replica, or the stopped container's restarted process,
//!    whichever is first), and → a pool changed at the same moment is
//!    reconciled (`status.observedGeneration` caught up);
//! 2. with one replica, the controller pod deleted (`kubectl delete pod`,
//!    graceful) → the ReplicaSet's new pod leading and reconciling;
//! 3. the same with the pod force-deleted (SIGKILL, the Lease is not
//!    released: the new pod waits for it to expire).
//!
//! Times are taken by polling the Lease and the pool every 10 ms through
//! the API. Prints what it measured; asserts nothing.
//!
//! ```text
//! cargo bench --bench install
//! AGENTDECK_BENCH_ROUNDS=2 cargo bench --bench install
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentdeck::crd::AgentPool;
use agentdeck::sandbox::Sandbox;
use agentdeck::sandbox::kubelet::KubeletConfig;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

const SYSTEM: &str = "agentdeck-system";
const POOL: &str = "quickstart";
const TICK: Duration = Duration::from_millis(10);
const GIVE_UP: Duration = Duration::from_secs(180);

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_agentdeck")
}

fn run(program: &str, args: &[&str], kubeconfig: &Path, stdin: Option<&str>) -> String {
    let mut child = Command::new(program)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("stdin written");
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().expect("finishes");
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn until<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(start.elapsed() < GIVE_UP, "gave up waiting for {what}");
        tokio::time::sleep(TICK).await;
    }
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get("agentdeck-controller")
        .await
        .ok()?
        .spec?
        .holder_identity
}

/// Running, Ready controller pods (not being deleted), by name.
async fn ready_controllers(pods: &Api<Pod>) -> Vec<String> {
    let lp = ListParams::default().labels("app.kubernetes.io/component=controller");
    let Ok(list) = pods.list(&lp).await else {
        return Vec::new();
    };
    list.items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .filter_map(|p| p.metadata.name)
        .collect()
}

fn pod_of(holder: &str, names: &[String]) -> Option<String> {
    names
        .iter()
        .find(|n| holder.starts_with(&format!("{n}-")))
        .cloned()
}

/// The daemon process of controller pod `pod` (its `HOSTNAME`).
fn daemon_pid(pod: &str) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let env = std::fs::read(e.path().join("environ")).ok()?;
        let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
        let host = format!("HOSTNAME={pod}");
        let is_pod = env.split(|b| *b == 0).any(|kv| kv == host.as_bytes());
        (is_pod && String::from_utf8_lossy(&cmd).contains("--daemon")).then_some(pid)
    })
}

/// Changes the pool's spec; returns the generation a reconcile must observe.
async fn touch_pool(pools: &Api<AgentPool>, round: usize) -> i64 {
    let max = 4 + i32::try_from(round % 2).unwrap_or(0);
    let p = pools
        .patch(
            POOL,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"maxReplicas": max + 1}})),
        )
        .await
        .expect("pool patched");
    p.metadata.generation.unwrap_or_default()
}

async fn observed(pools: &Api<AgentPool>, generation: i64) -> Option<()> {
    let p = pools.get(POOL).await.ok()?;
    (p.status?.observed_generation? >= generation).then_some(())
}

struct Round {
    leading: Duration,
    reconciled: Duration,
    new_pod: Option<Duration>,
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn print(title: &str, rounds: &[Round]) {
    println!("{title}");
    for (i, r) in rounds.iter().enumerate() {
        let created = r
            .new_pod
            .map(|d| format!("new pod Ready {}, ", secs(d)))
            .unwrap_or_default();
        println!(
            "  round {}: {created}leading {}, reconciled {}",
            i + 1,
            secs(r.leading),
            secs(r.reconciled)
        );
    }
    let mut lead: Vec<Duration> = rounds.iter().map(|r| r.leading).collect();
    let mut rec: Vec<Duration> = rounds.iter().map(|r| r.reconciled).collect();
    lead.sort();
    rec.sort();
    if let (Some(l), Some(r)) = (lead.get(lead.len() / 2), rec.get(rec.len() / 2)) {
        println!(
            "  median: leading {}, reconciled {} (max {} / {})",
            secs(*l),
            secs(*r),
            secs(lead.last().copied().unwrap_or_default()),
            secs(rec.last().copied().unwrap_or_default())
        );
    }
}

/// SIGTERM to the leading pod's process, the other replica standing by.
async fn sigterm_rounds(client: &Client, n: usize) -> Vec<Round> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), SYSTEM);
    let pods: Api<Pod> = Api::namespaced(client.clone(), SYSTEM);
    let pools: Api<AgentPool> = Api::namespaced(client.clone(), "default");
    let mut rounds = Vec::new();
    let mut restarted_won = 0;
    for round in 0..n {
        // Both replicas up (the one stopped last round has restarted) and
        // one of them leading.
        let (identity, leader, pid) = until("two Ready replicas, one leading", || async {
            let names = ready_controllers(&pods).await;
            let identity = holder(&leases).await?;
            let leader = pod_of(&identity, &names)?;
            let pid = daemon_pid(&leader)?;
            (names.len() == 2).then_some((identity, leader, pid))
        })
        .await;
        // A random phase against the replicas' 2 s election retry: the
        // figures are then what any moment of failure would see.
        tokio::time::sleep(Duration::from_millis(3000 + fastrand::u64(..2000))).await;
        let t0 = Instant::now();
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        );
        let generation = touch_pool(&pools, round).await;
        let (mut leading, mut reconciled) = (None, None);
        while leading.is_none() || reconciled.is_none() {
            assert!(
                t0.elapsed() < GIVE_UP,
                "the successor never led and reconciled"
            );
            // The stopped process's container restarts at once (its first
            // restart has no back-off) and may win the Lease itself: any
            // other identity is a successor.
            if leading.is_none()
                && let Some(h) = holder(&leases).await
                && h != identity
                && !h.is_empty()
            {
                leading = Some(t0.elapsed());
                if h.starts_with(&format!("{leader}-")) {
                    restarted_won += 1;
                }
            }
            if reconciled.is_none() && observed(&pools, generation).await.is_some() {
                reconciled = Some(t0.elapsed());
            }
            tokio::time::sleep(TICK).await;
        }
        rounds.push(Round {
            leading: leading.unwrap_or_default(),
            reconciled: reconciled.unwrap_or_default(),
            new_pod: None,
        });
    }
    println!(
        "  (the standby took over in {} of {n} rounds, the restarted process in {restarted_won})",
        n - restarted_won
    );
    rounds
}

/// One replica; its pod deleted (gracefully, or forced with SIGKILL).
async fn delete_rounds(client: &Client, n: usize, force: bool) -> Vec<Round> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), SYSTEM);
    let pods: Api<Pod> = Api::namespaced(client.clone(), SYSTEM);
    let pools: Api<AgentPool> = Api::namespaced(client.clone(), "default");
    let mut rounds = Vec::new();
    for round in 0..n {
        let old = until("the one replica leading", || async {
            let names = ready_controllers(&pods).await;
            let leader = pod_of(&holder(&leases).await?, &names)?;
            (names.len() == 1).then_some(leader)
        })
        .await;
        // A random phase against the replicas' 2 s election retry: the
        // figures are then what any moment of failure would see.
        tokio::time::sleep(Duration::from_millis(3000 + fastrand::u64(..2000))).await;
        let dp = if force {
            DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            }
        } else {
            DeleteParams::default()
        };
        let t0 = Instant::now();
        pods.delete(&old, &dp).await.expect("pod deleted");
        let generation = touch_pool(&pools, round).await;
        let (mut created, mut leading, mut reconciled) = (None, None, None);
        while leading.is_none() || reconciled.is_none() {
            assert!(
                t0.elapsed() < GIVE_UP,
                "the new pod never led and reconciled"
            );
            if created.is_none()
                && ready_controllers(&pods)
                    .await
                    .iter()
                    .any(|name| *name != old)
            {
                created = Some(t0.elapsed());
            }
            if leading.is_none()
                && holder(&leases)
                    .await
                    .is_some_and(|h| !h.starts_with(&format!("{old}-")) && !h.is_empty())
            {
                leading = Some(t0.elapsed());
            }
            if reconciled.is_none() && observed(&pools, generation).await.is_some() {
                reconciled = Some(t0.elapsed());
            }
            tokio::time::sleep(TICK).await;
        }
        rounds.push(Round {
            leading: leading.unwrap_or_default(),
            reconciled: reconciled.unwrap_or_default(),
            new_pod: created,
        });
    }
    rounds
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rounds: usize = std::env::var("AGENTDECK_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let sandbox = rt
        .block_on(Sandbox::start_with_kubelet(
            0,
            2,
            KubeletConfig {
                exe: PathBuf::from(bin()),
                ..KubeletConfig::from_env()
            },
        ))
        .expect("sandbox starts");
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, sandbox.kubeconfig("default")).expect("kubeconfig");
    let crds = run(bin(), &["crds"], &kubeconfig, None);
    run("kubectl", &["apply", "-f", "-"], &kubeconfig, Some(&crds));
    let manifests = run(
        bin(),
        &["manifests", "--pools", "config/pool-quickstart.yaml"],
        &kubeconfig,
        None,
    );
    run(
        "kubectl",
        &["apply", "-f", "-"],
        &kubeconfig,
        Some(&manifests),
    );
    let client = {
        let _g = rt.enter();
        sandbox.client().expect("client")
    };
    println!("installed controller (2 replicas, 15 s lease, 2 s retry), {rounds} rounds each:");
    let r = rt.block_on(sigterm_rounds(&client, rounds));
    print(
        "SIGTERM of the leader's process → successor leading / reconciled",
        &r,
    );
    run(
        "kubectl",
        &[
            "scale",
            "deploy/agentdeck-controller",
            "-n",
            SYSTEM,
            "--replicas=1",
        ],
        &kubeconfig,
        None,
    );
    let r = rt.block_on(delete_rounds(&client, rounds, false));
    print(
        "one replica, its pod deleted (kubectl delete pod) → new pod leading / reconciled",
        &r,
    );
    let r = rt.block_on(delete_rounds(&client, rounds.div_ceil(2), true));
    print(
        "one replica, its pod force-deleted (SIGKILL, Lease not released) → new pod leading / reconciled",
        &r,
    );
    rt.block_on(sandbox.stop());
}
