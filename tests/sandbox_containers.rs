//! Containers of images the sandbox does not have run their command, the
//! host's userland standing in for the image (issue 43, item 4): logs,
//! exit codes, restart policy, exec with stdin and exit codes, `kubectl
//! cp`, and a program the machine does not have failing as a missing
//! binary fails under containerd — all through the real kubectl.

mod common;

use common::{TestSandbox, err, eventually_blocking, out};
use serde_json::Value;

fn pod_json(sb: &TestSandbox, name: &str) -> Value {
    serde_json::from_str(&sb.kubectl_ok(&["get", "pod", name, "-o", "json"])).expect("pod json")
}

fn wait_phase(sb: &TestSandbox, name: &str, phase: &str) -> Value {
    eventually_blocking(&format!("pod {name} to be {phase}"), || {
        let pod = pod_json(sb, name);
        (pod["status"]["phase"] == phase).then_some(pod)
    })
}

fn stand_in(pod: &Value) -> String {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "sandbox.agentdeck.dev/StandIn")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_busybox_pods_command_runs_logs_and_fails_the_pod_with_its_exit_code() {
    let sb = TestSandbox::start();
    sb.kubectl_ok(&[
        "run",
        "bb",
        "--image=busybox",
        "--restart=Never",
        "--",
        "sh",
        "-c",
        "echo hello; exit 3",
    ]);
    let pod = wait_phase(&sb, "bb", "Failed");
    let terminated = &pod["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(terminated["exitCode"], 3, "{terminated}");
    assert_eq!(terminated["reason"], "Error", "{terminated}");
    assert_eq!(sb.kubectl_ok(&["logs", "bb"]), "hello\n");
    let said = stand_in(&pod);
    assert!(
        said.contains("bb: the host's sh runs for image busybox"),
        "{said}"
    );
    // OnFailure restarts it; a zero exit ends it Succeeded.
    sb.kubectl_ok(&[
        "run",
        "ok",
        "--image=busybox",
        "--restart=Never",
        "--",
        "sh",
        "-c",
        "echo done",
    ]);
    wait_phase(&sb, "ok", "Succeeded");
    sb.kubectl_ok(&[
        "run",
        "again",
        "--image=busybox",
        "--restart=OnFailure",
        "--",
        "sh",
        "-c",
        "exit 1",
    ]);
    eventually_blocking("the failing container to be restarted", || {
        let pod = pod_json(&sb, "again");
        let s = &pod["status"]["containerStatuses"][0];
        (s["restartCount"].as_u64() >= Some(1) && s["lastState"]["terminated"]["exitCode"] == 1)
            .then_some(())
    });
}

#[test]
fn exec_into_a_busybox_container_reads_stdin_returns_exit_codes_and_copies_files() {
    let sb = TestSandbox::start();
    sb.kubectl_in_ok(
        &["apply", "-f", "-"],
        r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sl", "namespace": "default"},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"],
                                     "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                     "volumes": [{"name": "data", "emptyDir": {}}]}}"#,
    );
    sb.kubectl_ok(&["wait", "--for=condition=Ready", "pod/sl", "--timeout=120s"]);
    assert_eq!(
        sb.kubectl_in_ok(&["exec", "-i", "sl", "--", "cat"], "x\n"),
        "x\n"
    );
    let o = sb.kubectl(&["exec", "sl", "--", "sh", "-c", "exit 7"]);
    assert_eq!(o.status.code(), Some(7), "{}", err(&o));
    let o = sb.kubectl(&["exec", "sl", "--", "no-such-program-here"]);
    assert!(!o.status.success());
    assert!(
        err(&o).contains("executable file not found in $PATH"),
        "{}",
        err(&o)
    );
    // kubectl cp both ways, through the container's tar.
    let dir = tempfile::tempdir().expect("tempdir");
    let local = dir.path().join("note.txt");
    std::fs::write(&local, "copied\n").expect("write");
    sb.kubectl_ok(&["cp", local.to_str().expect("utf-8"), "sl:/data/note.txt"]);
    assert_eq!(
        sb.kubectl_ok(&["exec", "sl", "--", "cat", "/data/note.txt"]),
        "copied\n"
    );
    let back = dir.path().join("back.txt");
    sb.kubectl_ok(&["cp", "sl:/data/note.txt", back.to_str().expect("utf-8")]);
    assert_eq!(std::fs::read_to_string(&back).expect("read"), "copied\n");
}

#[test]
fn a_program_the_machine_does_not_have_fails_as_a_missing_binary() {
    let sb = TestSandbox::start();
    sb.kubectl_ok(&[
        "run",
        "web",
        "--image=nginx",
        "--command",
        "--",
        "/docker-entrypoint.sh",
        "nginx",
        "-g",
        "daemon off;",
    ]);
    let message =
        "exec: \"/docker-entrypoint.sh\": stat /docker-entrypoint.sh: no such file or directory";
    let pod = eventually_blocking("the container to crash-loop", || {
        let pod = pod_json(&sb, "web");
        let s = &pod["status"]["containerStatuses"][0];
        (s["state"]["waiting"]["reason"] == "CrashLoopBackOff").then_some(pod)
    });
    let s = &pod["status"]["containerStatuses"][0];
    let last = &s["lastState"]["terminated"];
    assert_eq!(last["reason"], "StartError", "{s}");
    assert_eq!(last["exitCode"], 128, "{s}");
    assert!(
        last["message"]
            .as_str()
            .unwrap_or_default()
            .contains(message),
        "{s}"
    );
    assert_eq!(pod["status"]["phase"], "Running", "{s}");
    assert!(!stand_in(&pod).is_empty());
    let events = sb.kubectl_ok(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=web",
    ]);
    assert!(
        events.contains("Failed") && events.contains(message),
        "{events}"
    );
    // Under restartPolicy Never the pod fails with it.
    sb.kubectl_ok(&[
        "run",
        "once",
        "--image=redis",
        "--restart=Never",
        "--command",
        "--",
        "no-such-server-here",
    ]);
    let pod = wait_phase(&sb, "once", "Failed");
    let t = &pod["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(t["reason"], "StartError", "{t}");
    assert!(
        t["message"]
            .as_str()
            .unwrap_or_default()
            .contains("exec: \"no-such-server-here\": executable file not found in $PATH"),
        "{t}"
    );
    let shown = out(&sb.kubectl(&["get", "pod", "once"]));
    assert!(shown.contains("StartError"), "{shown}");
}

#[test]
fn kubectl_run_i_rm_attaches_to_the_containers_shell_and_returns_its_exit_code() {
    let sb = TestSandbox::start();
    // No command: busybox's default `sh`, which reads what kubectl attaches.
    let o = sb.kubectl_in(
        &[
            "run",
            "-i",
            "--rm",
            "shell",
            "--image=busybox",
            "--restart=Never",
        ],
        "echo hi-from-stdin\nexit 3\n",
    );
    assert_eq!(o.status.code(), Some(3), "{}\n{}", out(&o), err(&o));
    assert!(out(&o).contains("hi-from-stdin"), "{}", out(&o));
    assert!(out(&o).contains("pod \"shell\" deleted"), "{}", out(&o));
    // Attach to a container that keeps no input open says what to use.
    sb.kubectl_ok(&["run", "sl", "--image=busybox", "--", "sleep", "3600"]);
    sb.kubectl_ok(&["wait", "--for=condition=Ready", "pod/sl", "--timeout=120s"]);
    let o = sb.kubectl(&["attach", "sl"]);
    assert!(!o.status.success());
    assert!(err(&o).contains("stdin: true"), "{}", err(&o));
}

fn container_state(pod: &Value) -> &Value {
    &pod["status"]["containerStatuses"][0]
}

#[test]
fn commandless_containers_run_their_images_default_or_fail_as_a_node_would() {
    let sb = TestSandbox::start();
    // nginx's ENTRYPOINT is not on this machine: a missing binary.
    sb.kubectl_ok(&["create", "deployment", "web", "--image=nginx"]);
    // busybox's CMD is `sh`, which without input exits at once.
    sb.kubectl_ok(&["run", "bb", "--image=busybox"]);
    // An image the sandbox does not know has nothing it can run.
    sb.kubectl_ok(&["run", "app", "--image=example.com/acme/app:2"]);
    // The pause image sleeps until stopped, as on a node.
    sb.kubectl_ok(&["run", "placeholder", "--image=registry.k8s.io/pause:3.10"]);

    let web = sb.kubectl_ok(&["get", "pods", "-l", "app=web", "-o", "name"]);
    let web = web.trim().trim_start_matches("pod/").to_string();
    let pod = eventually_blocking("nginx to fail to start, then back off", || {
        let pod = pod_json(&sb, &web);
        let s = container_state(&pod);
        (s["lastState"]["terminated"]["reason"] == "StartError"
            && s["state"]["waiting"]["reason"] == "CrashLoopBackOff")
            .then_some(pod)
    });
    let s = container_state(&pod);
    assert_eq!(s["ready"], false, "{s}");
    assert!(
        s["lastState"]["terminated"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("exec: \"/docker-entrypoint.sh\": stat /docker-entrypoint.sh"),
        "{s}"
    );

    let pod = eventually_blocking("busybox's sh to exit into a crash loop", || {
        let pod = pod_json(&sb, "bb");
        let s = container_state(&pod);
        (s["state"]["waiting"]["reason"] == "CrashLoopBackOff"
            && s["lastState"]["terminated"]["reason"] == "Completed")
            .then_some(pod)
    });
    assert_eq!(
        container_state(&pod)["lastState"]["terminated"]["exitCode"],
        0
    );

    let pod = eventually_blocking("the unknown image to back off its pull", || {
        let pod = pod_json(&sb, "app");
        (container_state(&pod)["state"]["waiting"]["reason"] == "ImagePullBackOff").then_some(pod)
    });
    assert_eq!(pod["status"]["phase"], "Pending");
    let message = container_state(&pod)["state"]["waiting"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.starts_with(
            "Back-off pulling image \"example.com/acme/app:2\": ErrImagePull: rpc error: code = Unknown desc = failed to pull and unpack image \"example.com/acme/app:2\""
        ) && message.contains("registry.k8s.io/pause"),
        "{message}"
    );
    let table = sb.kubectl_ok(&["get", "pod", "app", "--no-headers"]);
    assert!(
        table.contains("ImagePullBackOff") || table.contains("ErrImagePull"),
        "{table}"
    );
    let events = sb.kubectl_ok(&["events", "--for", "pod/app"]);
    assert!(
        events.contains("Pulling image \"example.com/acme/app:2\"")
            && events.contains("Failed to pull image \"example.com/acme/app:2\""),
        "{events}"
    );

    sb.kubectl_ok(&[
        "wait",
        "--for=condition=Ready",
        "pod/placeholder",
        "--timeout=120s",
    ]);
    let pod = pod_json(&sb, "placeholder");
    assert!(container_state(&pod)["state"]["running"].is_object());
    assert!(
        stand_in(&pod).contains("/pause is played"),
        "{}",
        stand_in(&pod)
    );
    assert_eq!(sb.kubectl_ok(&["logs", "placeholder"]), "");
}

#[test]
fn a_containers_command_is_pid_1_of_its_own_pid_namespace_and_exec_joins_it() {
    // This build's binary sets up the container's namespaces.
    let sb = TestSandbox::start_with(agentdeck::sandbox::kubelet::KubeletConfig {
        exe: std::path::PathBuf::from(env!("CARGO_BIN_EXE_agentdeck")),
        mount_namespaces: true,
        ..agentdeck::sandbox::kubelet::KubeletConfig::from_env()
    });
    sb.kubectl_ok(&[
        "run",
        "pid",
        "--image=busybox",
        "--",
        "sh",
        "-c",
        // `$$` is Kubernetes' escape for `$`.
        "echo pid=$$$$; exec sleep 3600",
    ]);
    sb.kubectl_ok(&["wait", "--for=condition=Ready", "pod/pid", "--timeout=120s"]);
    let log = eventually_blocking("the command's pid in its log", || {
        let log = sb.kubectl_ok(&["logs", "pid"]);
        (!log.is_empty()).then_some(log)
    });
    assert_eq!(log, "pid=1\n");
    assert!(
        stand_in(&pod_json(&sb, "pid")).contains("in mount and PID namespaces of its own"),
        "{}",
        stand_in(&pod_json(&sb, "pid"))
    );
    // Exec'd processes are in the container's namespace: PID 1 is its
    // command, and /proc lists only the container's processes.
    let one = sb.kubectl_ok(&["exec", "pid", "--", "cat", "/proc/1/cmdline"]);
    assert_eq!(one.replace('\0', " ").trim(), "sleep 3600");
    let listed = sb.kubectl_ok(&[
        "exec",
        "pid",
        "--",
        "sh",
        "-c",
        "echo self=$$; ls /proc | grep -E '^[0-9]+$'",
    ]);
    let mut lines = listed.lines();
    let own: u32 = lines
        .next()
        .and_then(|l| l.strip_prefix("self="))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{listed}"));
    let pids: Vec<u32> = lines.filter_map(|l| l.parse().ok()).collect();
    assert!(
        own > 1 && pids.contains(&own) && pids.contains(&1),
        "{listed}"
    );
    // sleep, the exec'd sh, ls and grep: nothing of the host's.
    assert!(pids.len() <= 4, "{listed}");
}
