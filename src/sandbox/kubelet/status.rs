//! Pod status as the kubelet reports it, computed from what the node knows
//! about its containers: phase (kubelet `getPhase`), the kubelet-owned
//! conditions (`pkg/kubelet/status/generate.go`) and container statuses.
//! Pure: no clock (the caller passes `now`), no I/O.

use serde_json::{Map, Value, json};

/// A container instance that has ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Terminated {
    /// `agentdeck://<hex>`, or empty for a container that never ran.
    pub container_id: String,
    /// Exit status; 128 + signal for a signalled process, as runtimes report it.
    pub exit_code: i32,
    /// `Completed`, `Error`, `ContainerStatusUnknown`.
    pub reason: String,
    /// Set for `ContainerStatusUnknown`.
    pub message: Option<String>,
    /// When it started (RFC 3339, seconds), empty when it never ran.
    pub started_at: String,
    /// When it ended.
    pub finished_at: String,
}

impl Terminated {
    /// An exit, with the reason a container runtime gives it.
    pub fn exited(container_id: &str, exit_code: i32, started_at: &str, finished_at: &str) -> Self {
        Terminated {
            container_id: container_id.to_string(),
            exit_code,
            reason: if exit_code == 0 { "Completed" } else { "Error" }.to_string(),
            message: None,
            started_at: started_at.to_string(),
            finished_at: finished_at.to_string(),
        }
    }

    fn to_json(&self) -> Value {
        let mut t = json!({
            "exitCode": self.exit_code,
            "reason": self.reason,
            "finishedAt": self.finished_at,
        });
        if !self.container_id.is_empty() {
            t["containerID"] = json!(self.container_id);
        }
        if !self.started_at.is_empty() {
            t["startedAt"] = json!(self.started_at);
        }
        if let Some(m) = &self.message {
            t["message"] = json!(m);
        }
        t
    }
}

/// What a container is doing now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum State {
    /// Not running: `ContainerCreating`, `PodInitializing`, `CrashLoopBackOff`,
    /// `CreateContainerConfigError`.
    Waiting {
        reason: String,
        message: Option<String>,
    },
    /// Running since `started_at`.
    Running {
        container_id: String,
        started_at: String,
    },
    /// Ended.
    Terminated(Terminated),
}

impl State {
    pub fn waiting(reason: &str) -> Self {
        State::Waiting {
            reason: reason.to_string(),
            message: None,
        }
    }
}

/// One container's status as the node sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ContainerStatus {
    pub name: String,
    pub image: String,
    pub state: State,
    /// `lastState.terminated`: the instance before the current one.
    pub last: Option<Terminated>,
    pub restart_count: u32,
    pub ready: bool,
    /// What stands in for its image (see [`super::policy`]), once started.
    pub stand_in: Option<String>,
}

impl ContainerStatus {
    pub fn new(name: &str, image: &str, waiting_reason: &str) -> Self {
        ContainerStatus {
            name: name.to_string(),
            image: image.to_string(),
            state: State::waiting(waiting_reason),
            last: None,
            restart_count: 0,
            ready: false,
            stand_in: None,
        }
    }

    fn container_id(&self) -> Option<&str> {
        match &self.state {
            State::Running { container_id, .. } => Some(container_id),
            State::Terminated(t) if !t.container_id.is_empty() => Some(&t.container_id),
            _ => None,
        }
    }

    fn to_json(&self, pod_terminal: bool) -> Value {
        let state = match &self.state {
            State::Waiting { reason, message } => {
                let mut w = json!({"reason": reason});
                if let Some(m) = message {
                    w["message"] = json!(m);
                }
                json!({"waiting": w})
            }
            State::Running { started_at, .. } => json!({"running": {"startedAt": started_at}}),
            State::Terminated(t) => json!({"terminated": t.to_json()}),
        };
        let last = match &self.last {
            Some(t) => json!({"terminated": t.to_json()}),
            None => json!({}),
        };
        let running = matches!(self.state, State::Running { .. });
        let mut s = json!({
            "name": self.name,
            "image": self.image,
            "imageID": image_id(&self.image),
            "ready": self.ready && running && !pod_terminal,
            "restartCount": self.restart_count,
            "started": running && !pod_terminal,
            "state": state,
            "lastState": last,
        });
        if let Some(id) = self.container_id() {
            s["containerID"] = json!(id);
        }
        s
    }
}

/// A stable, plausible `imageID` (`<repo>@sha256:<hex>`): the sandbox pulls
/// nothing, but clients (and `kubectl describe`) expect a digest.
fn image_id(image: &str) -> String {
    let repo = image.split('@').next().unwrap_or(image);
    let repo = match repo.rsplit_once(':') {
        Some((r, tag)) if !tag.contains('/') => r,
        _ => repo,
    };
    let mut hex = String::with_capacity(64);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for round in 0u8..4 {
        for b in image.bytes().chain([round]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        hex.push_str(&format!("{h:016x}"));
    }
    format!("{repo}@sha256:{hex}")
}

/// Everything the node knows about one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PodSnapshot {
    pub host_ip: String,
    /// Set once the pod's network is up.
    pub pod_ip: Option<String>,
    pub start_time: String,
    /// The pod's sandbox (directory, volumes, IP) exists.
    pub sandbox_ready: bool,
    /// The kubelet has stopped the pod for good (deleted, or all containers
    /// finished under its restart policy).
    pub terminal: bool,
    pub restart_policy: String,
    pub init: Vec<ContainerStatus>,
    pub containers: Vec<ContainerStatus>,
}

/// Pod phase, as the kubelet's `getPhase` decides it.
pub(super) fn phase(snap: &PodSnapshot) -> &'static str {
    let mut pending_init = 0;
    let mut failed_init = 0;
    for c in &snap.init {
        match &c.state {
            State::Running { .. } => pending_init += 1,
            State::Terminated(t) => {
                if t.exit_code != 0 {
                    failed_init += 1;
                }
            }
            State::Waiting { .. } => match &c.last {
                Some(t) if t.exit_code != 0 => failed_init += 1,
                Some(_) => {}
                None => pending_init += 1,
            },
        }
    }
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for c in &snap.containers {
        match &c.state {
            State::Running { .. } => running += 1,
            State::Terminated(t) => {
                stopped += 1;
                if t.exit_code == 0 {
                    succeeded += 1;
                }
            }
            State::Waiting { .. } => {
                if c.last.is_some() {
                    stopped += 1;
                } else {
                    waiting += 1;
                }
            }
        }
    }
    if failed_init > 0 && snap.restart_policy == "Never" {
        return "Failed";
    }
    if pending_init > 0 || waiting > 0 {
        return "Pending";
    }
    if running > 0 {
        return "Running";
    }
    if stopped > 0 {
        if snap.terminal {
            return if stopped == succeeded {
                "Succeeded"
            } else {
                "Failed"
            };
        }
        if snap.restart_policy == "Always" {
            return "Running";
        }
        if stopped == succeeded {
            return "Succeeded";
        }
        if snap.restart_policy == "Never" {
            return "Failed";
        }
        return "Running";
    }
    "Pending"
}

/// `[a b]`, as Go prints a `[]string`.
pub(super) fn go_list(names: &[&str]) -> String {
    format!("[{}]", names.join(" "))
}

fn condition(kind: &str, ok: bool, reason: Option<&str>, message: Option<String>) -> Value {
    let mut c = json!({
        "type": kind,
        "status": if ok { "True" } else { "False" },
        "lastProbeTime": null,
    });
    if let Some(r) = reason {
        c["reason"] = json!(r);
    }
    if let Some(m) = message {
        c["message"] = json!(m);
    }
    c
}

/// The kubelet-owned conditions, in the order the kubelet writes them.
fn conditions(snap: &PodSnapshot, phase: &str) -> Vec<Value> {
    let mut out = Vec::new();
    out.push(condition(
        "PodReadyToStartContainers",
        snap.sandbox_ready && !snap.terminal && !matches!(phase, "Succeeded" | "Failed"),
        None,
        None,
    ));

    let any_regular_started = snap
        .containers
        .iter()
        .any(|c| !matches!(c.state, State::Waiting { .. }) || c.last.is_some());
    let incomplete: Vec<&str> = snap
        .init
        .iter()
        .filter(|c| !matches!(&c.state, State::Terminated(t) if t.exit_code == 0))
        .map(|c| c.name.as_str())
        .collect();
    out.push(if phase == "Succeeded" {
        condition("Initialized", true, Some("PodCompleted"), None)
    } else if any_regular_started || incomplete.is_empty() {
        condition("Initialized", true, None, None)
    } else {
        condition(
            "Initialized",
            false,
            Some("ContainersNotInitialized"),
            Some(format!(
                "containers with incomplete status: {}",
                go_list(&incomplete)
            )),
        )
    });

    let ready = |kind: &str| -> Value {
        match phase {
            "Succeeded" => condition(kind, false, Some("PodCompleted"), None),
            "Failed" => condition(kind, false, Some("PodFailed"), None),
            _ => {
                let unready: Vec<&str> = snap
                    .containers
                    .iter()
                    .filter(|c| !(c.ready && matches!(c.state, State::Running { .. })))
                    .map(|c| c.name.as_str())
                    .collect();
                if unready.is_empty() && !snap.terminal {
                    condition(kind, true, None, None)
                } else {
                    condition(
                        kind,
                        false,
                        Some("ContainersNotReady"),
                        Some(format!(
                            "containers with unready status: {}",
                            go_list(&unready)
                        )),
                    )
                }
            }
        }
    };
    out.push(ready("Ready"));
    out.push(ready("ContainersReady"));
    out.push(condition("PodScheduled", true, None, None));
    let stand_ins: Vec<String> = snap
        .init
        .iter()
        .chain(&snap.containers)
        .filter_map(|c| Some(format!("{}: {}", c.name, c.stand_in.as_deref()?)))
        .collect();
    if !stand_ins.is_empty() {
        out.push(condition(
            super::policy::STAND_IN_CONDITION,
            true,
            Some("NoContainerImages"),
            Some(format!(
                "the agentdeck sandbox pulls no images; {}",
                stand_ins.join("; ")
            )),
        ));
    }
    out
}

const KUBELET_CONDITIONS: [&str; 6] = [
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
    super::policy::STAND_IN_CONDITION,
];

/// The pod's new `status`: `old` (what the API has) with the kubelet-owned
/// fields replaced. Conditions keep their `lastTransitionTime` while their
/// status stays the same; conditions others own (DisruptionTarget …) are
/// kept ahead of the kubelet's, as the kubelet does. A terminal phase in
/// `old` is never left.
pub(super) fn pod_status(old: &Value, snap: &PodSnapshot, now: &str) -> Value {
    let mut status: Map<String, Value> = old.as_object().cloned().unwrap_or_default();
    let old_phase = old.get("phase").and_then(Value::as_str).unwrap_or_default();
    let phase = match old_phase {
        "Succeeded" => "Succeeded",
        "Failed" => "Failed",
        _ => phase(snap),
    };
    let old_conditions: Vec<Value> = old
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut conds: Vec<Value> = old_conditions
        .iter()
        .filter(|c| {
            !KUBELET_CONDITIONS.contains(&c.get("type").and_then(Value::as_str).unwrap_or_default())
        })
        .cloned()
        .collect();
    for mut c in conditions(snap, phase) {
        let previous = old_conditions
            .iter()
            .find(|o| o.get("type") == c.get("type"));
        let since = match previous {
            Some(p) if p.get("status") == c.get("status") => p
                .get("lastTransitionTime")
                .cloned()
                .unwrap_or_else(|| json!(now)),
            _ => json!(now),
        };
        c["lastTransitionTime"] = since;
        conds.push(c);
    }
    status.insert("phase".into(), json!(phase));
    status.insert("conditions".into(), Value::Array(conds));
    status.insert("hostIP".into(), json!(snap.host_ip));
    status.insert("hostIPs".into(), json!([{"ip": snap.host_ip}]));
    match &snap.pod_ip {
        Some(ip) => {
            status.insert("podIP".into(), json!(ip));
            status.insert("podIPs".into(), json!([{"ip": ip}]));
        }
        None => {
            status.remove("podIP");
            status.remove("podIPs");
        }
    }
    status.insert("startTime".into(), json!(snap.start_time));
    let terminal = snap.terminal || matches!(phase, "Succeeded" | "Failed");
    if snap.init.is_empty() {
        status.remove("initContainerStatuses");
    } else {
        status.insert(
            "initContainerStatuses".into(),
            Value::Array(snap.init.iter().map(|c| c.to_json(terminal)).collect()),
        );
    }
    status.insert(
        "containerStatuses".into(),
        Value::Array(
            snap.containers
                .iter()
                .map(|c| c.to_json(terminal))
                .collect(),
        ),
    );
    Value::Object(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: &str = "2025-01-01T00:00:00Z";
    const T1: &str = "2025-01-01T00:01:00Z";

    fn running(name: &str, ready: bool) -> ContainerStatus {
        ContainerStatus {
            state: State::Running {
                container_id: format!("agentdeck://{name}"),
                started_at: T0.into(),
            },
            ready,
            ..ContainerStatus::new(name, "nginx:1.27", "ContainerCreating")
        }
    }

    #[test]
    fn the_pod_says_what_stood_in_for_each_containers_image() {
        let mut a = running("a", true);
        a.stand_in = Some("the host's sh runs for image busybox".into());
        let mut b = running("b", true);
        b.stand_in = Some("image nginx is simulated".into());
        let status = pod_status(&json!({}), &snap("Always", vec![a, b]), T0);
        let c = cond(&status, super::super::policy::STAND_IN_CONDITION);
        assert_eq!(c["status"], "True");
        assert_eq!(c["reason"], "NoContainerImages");
        assert_eq!(
            c["message"],
            "the agentdeck sandbox pulls no images; a: the host's sh runs for image busybox; \
             b: image nginx is simulated"
        );
    }

    fn exited(name: &str, code: i32) -> ContainerStatus {
        ContainerStatus {
            state: State::Terminated(Terminated::exited("agentdeck://x", code, T0, T1)),
            ..ContainerStatus::new(name, "busybox", "ContainerCreating")
        }
    }

    fn crash_looping(name: &str, code: i32) -> ContainerStatus {
        ContainerStatus {
            state: State::waiting("CrashLoopBackOff"),
            last: Some(Terminated::exited("agentdeck://x", code, T0, T1)),
            restart_count: 1,
            ..ContainerStatus::new(name, "busybox", "ContainerCreating")
        }
    }

    fn snap(policy: &str, containers: Vec<ContainerStatus>) -> PodSnapshot {
        PodSnapshot {
            host_ip: "127.0.0.1".into(),
            pod_ip: Some("127.1.0.1".into()),
            start_time: T0.into(),
            sandbox_ready: true,
            terminal: false,
            restart_policy: policy.into(),
            init: vec![],
            containers,
        }
    }

    fn cond<'a>(status: &'a Value, kind: &str) -> &'a Value {
        status["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
            .unwrap_or_else(|| panic!("condition {kind} in {status}"))
    }

    #[test]
    fn phase_follows_the_kubelet_rules_for_each_restart_policy() {
        let cases: Vec<(&str, Vec<ContainerStatus>, bool, &str)> = vec![
            (
                "Always",
                vec![ContainerStatus::new("a", "i", "ContainerCreating")],
                false,
                "Pending",
            ),
            ("Always", vec![running("a", true)], false, "Running"),
            (
                "Always",
                vec![
                    running("a", true),
                    ContainerStatus::new("b", "i", "ContainerCreating"),
                ],
                false,
                "Pending",
            ),
            ("Always", vec![exited("a", 0)], false, "Running"),
            ("Always", vec![crash_looping("a", 1)], false, "Running"),
            ("Always", vec![exited("a", 0)], true, "Succeeded"),
            ("Always", vec![exited("a", 143)], true, "Failed"),
            ("OnFailure", vec![exited("a", 0)], false, "Succeeded"),
            ("OnFailure", vec![crash_looping("a", 2)], false, "Running"),
            (
                "OnFailure",
                vec![exited("a", 0), running("b", true)],
                false,
                "Running",
            ),
            (
                "Never",
                vec![exited("a", 0), exited("b", 0)],
                false,
                "Succeeded",
            ),
            (
                "Never",
                vec![exited("a", 0), exited("b", 3)],
                false,
                "Failed",
            ),
            (
                "Never",
                vec![exited("a", 3), running("b", true)],
                false,
                "Running",
            ),
        ];
        for (policy, containers, terminal, want) in cases {
            let mut s = snap(policy, containers.clone());
            s.terminal = terminal;
            assert_eq!(
                phase(&s),
                want,
                "{policy} {containers:?} terminal={terminal}"
            );
        }
    }

    #[test]
    fn a_failed_init_container_fails_a_never_restarting_pod() {
        let mut s = snap(
            "Never",
            vec![ContainerStatus::new("main", "i", "PodInitializing")],
        );
        s.init = vec![exited("init", 1)];
        assert_eq!(phase(&s), "Failed");
        s.restart_policy = "Always".into();
        s.init = vec![running("init", false)];
        assert_eq!(phase(&s), "Pending");
        let status = pod_status(&json!({}), &s, T0);
        let init = cond(&status, "Initialized");
        assert_eq!(init["status"], "False");
        assert_eq!(init["reason"], "ContainersNotInitialized");
        assert_eq!(init["message"], "containers with incomplete status: [init]");
    }

    #[test]
    fn a_running_pod_is_ready_when_all_its_containers_are() {
        let status = pod_status(
            &json!({"phase": "Pending"}),
            &snap("Always", vec![running("a", true), running("b", true)]),
            T0,
        );
        assert_eq!(status["phase"], "Running");
        for kind in [
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled",
        ] {
            assert_eq!(cond(&status, kind)["status"], "True", "{kind}");
            assert_eq!(cond(&status, kind)["lastTransitionTime"], T0, "{kind}");
        }
        let types: Vec<&str> = status["conditions"]
            .as_array()
            .map(|cs| cs.iter().filter_map(|c| c["type"].as_str()).collect())
            .unwrap_or_default();
        // Without a stand-in known yet, the kubelet's own five.
        assert_eq!(types, KUBELET_CONDITIONS[..5]);
        assert_eq!(status["podIPs"], json!([{"ip": "127.1.0.1"}]));
        assert_eq!(status["hostIPs"], json!([{"ip": "127.0.0.1"}]));
        assert_eq!(
            status["containerStatuses"][0]["state"]["running"]["startedAt"],
            T0
        );
        assert_eq!(status["containerStatuses"][0]["started"], true);
    }

    #[test]
    fn unready_containers_are_named_in_the_ready_condition() {
        let status = pod_status(
            &json!({}),
            &snap(
                "Always",
                vec![running("a", false), running("b", true), running("c", false)],
            ),
            T0,
        );
        let ready = cond(&status, "Ready");
        assert_eq!(ready["status"], "False");
        assert_eq!(ready["reason"], "ContainersNotReady");
        assert_eq!(ready["message"], "containers with unready status: [a c]");
    }

    #[test]
    fn transition_times_change_only_when_a_condition_changes() {
        let first = pod_status(&json!({}), &snap("Always", vec![running("a", false)]), T0);
        let second = pod_status(&first, &snap("Always", vec![running("a", true)]), T1);
        assert_eq!(cond(&second, "Ready")["lastTransitionTime"], T1);
        assert_eq!(cond(&second, "Initialized")["lastTransitionTime"], T0);
        assert_eq!(
            pod_status(&second, &snap("Always", vec![running("a", true)]), "later"),
            second
        );
    }

    #[test]
    fn completed_pods_report_pod_completed_and_keep_their_terminal_phase() {
        let s = snap("Never", vec![exited("a", 0)]);
        let status = pod_status(&json!({}), &s, T1);
        assert_eq!(status["phase"], "Succeeded");
        assert_eq!(cond(&status, "Ready")["reason"], "PodCompleted");
        assert_eq!(cond(&status, "Initialized")["reason"], "PodCompleted");
        assert_eq!(
            cond(&status, "PodReadyToStartContainers")["status"],
            "False"
        );
        let t = &status["containerStatuses"][0]["state"]["terminated"];
        assert_eq!(t["reason"], "Completed");
        assert_eq!(t["exitCode"], 0);
        assert_eq!(t["startedAt"], T0);
        assert_eq!(t["finishedAt"], T1);
        // Once terminal, always terminal.
        let again = pod_status(&status, &snap("Never", vec![running("a", true)]), T1);
        assert_eq!(again["phase"], "Succeeded");
    }

    #[test]
    fn a_failed_pod_reports_pod_failed() {
        let status = pod_status(&json!({}), &snap("Never", vec![exited("a", 2)]), T1);
        assert_eq!(status["phase"], "Failed");
        assert_eq!(cond(&status, "ContainersReady")["reason"], "PodFailed");
        assert_eq!(
            status["containerStatuses"][0]["state"]["terminated"]["reason"],
            "Error"
        );
    }

    #[test]
    fn foreign_conditions_and_fields_are_kept() {
        let old = json!({
            "qosClass": "BestEffort",
            "conditions": [
                {"type": "DisruptionTarget", "status": "True", "lastTransitionTime": T0},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2020-01-01T00:00:00Z"}
            ]
        });
        let status = pod_status(&old, &snap("Always", vec![running("a", true)]), T1);
        assert_eq!(status["qosClass"], "BestEffort");
        assert_eq!(status["conditions"][0]["type"], "DisruptionTarget");
        assert_eq!(
            cond(&status, "PodScheduled")["lastTransitionTime"],
            "2020-01-01T00:00:00Z"
        );
    }

    #[test]
    fn last_state_and_restart_count_are_reported() {
        let status = pod_status(&json!({}), &snap("Always", vec![crash_looping("a", 1)]), T1);
        let c = &status["containerStatuses"][0];
        assert_eq!(c["state"]["waiting"]["reason"], "CrashLoopBackOff");
        assert_eq!(c["lastState"]["terminated"]["exitCode"], 1);
        assert_eq!(c["restartCount"], 1);
        assert_eq!(c["ready"], false);
    }

    #[test]
    fn image_ids_are_digests_of_the_repository() {
        let id = image_id("nginx:1.27");
        assert!(id.starts_with("nginx@sha256:"), "{id}");
        assert_eq!(id.len(), "nginx@sha256:".len() + 64);
        assert!(image_id("localhost:5000/x").starts_with("localhost:5000/x@sha256:"));
        assert_ne!(image_id("nginx:1.27"), image_id("nginx:1.28"));
    }
}
