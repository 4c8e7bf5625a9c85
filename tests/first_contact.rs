//! The first minutes on a cluster where agentdeck is not installed yet,
//! as a new user meets it: the README's install walked step by step from
//! a bare sandbox (no CRDs, no agentdeck-system) with the console open,
//! and at every step the screen says what is missing next, never
//! `loading…` or `syncing`. Then the commands, and pools that live in a
//! namespace other than the one the console opened in.

mod common;

use agentdeck::install::{crd_documents, to_yaml_stream};
use common::tmux::Tmux;
use common::{TestSandbox, err, eventually_blocking, out};

const INSTALL: &str = "agentdeck crds | kubectl apply -f -";

fn crds() -> String {
    to_yaml_stream(&crd_documents()).expect("crds")
}

#[test]
fn the_readme_install_walked_from_a_bare_cluster_with_the_console_open() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let sb = TestSandbox::start();
    let kubeconfig = sb.kubeconfig.display().to_string();
    let t = Tmux::start(&["-n", "default"], &[("KUBECONFIG", &kubeconfig)], 140, 30);

    // Nothing installed: the pools view says so, with the command.
    let s = t.wait("the console saying agentdeck is not installed", |s| {
        s.contains("watch not installed") && s.contains(INSTALL)
    });
    assert!(!s.contains("loading…") && !s.contains("syncing"), "{s}");
    // The tasks view says the same.
    t.send(&["3"]);
    t.wait("the tasks view saying it too", |s| {
        s.contains("Tasks [0/0]") && s.contains(INSTALL)
    });
    t.send(&["1"]);

    // Step 1 of the README: the CRDs. Noticed without a restart; what is
    // missing next is the controller's namespace.
    sb.kubectl_in_ok(&["apply", "-f", "-"], &crds());
    let s = t.wait("the CRDs noticed, and why the console does not lead", |s| {
        s.contains("watch synced")
            && s.contains("no pools in default yet")
            && s.contains("namespace agentdeck-system missing (the Lease lives there)")
    });
    assert!(!s.contains(INSTALL), "{s}");

    // Step 2: the namespace. The console takes the Lease.
    sb.kubectl_ok(&["create", "namespace", "agentdeck-system"]);
    t.wait("the console leading", |s| s.contains("role leader"));

    // Step 3: a pool (the README's quickstart pool).
    eventually_blocking("the quickstart pool applied", || {
        sb.kubectl(&["apply", "-f", "config/pool-quickstart.yaml"])
            .status
            .success()
            .then_some(())
    });
    t.wait("the pool's row", |s| {
        s.contains("quickstart") && s.contains("Pools [1/1]")
    });
}

#[test]
fn without_the_crds_every_command_names_the_install_command_and_exits_1() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let sb = TestSandbox::start();
    for args in [
        vec!["status"],
        vec!["scale", "quickstart", "--max", "2", "--yes"],
        vec!["task", "cancel", "some-task", "--yes"],
    ] {
        let o = sb.agentdeck(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}{}", out(&o), err(&o));
        let e = err(&o);
        assert!(e.contains("agentdeck is not installed"), "{args:?}: {e}");
        assert!(e.contains(INSTALL), "{args:?}: {e}");
    }
    // Once installed, a task that is not there is the user's mistake again.
    sb.kubectl_in_ok(&["apply", "-f", "-"], &crds());
    let o = eventually_blocking("the CRDs served", || {
        let o = sb.agentdeck(&["task", "cancel", "some-task", "--yes"]);
        (o.status.code() == Some(2)).then_some(o)
    });
    assert!(
        err(&o).contains("no AgentTask \"some-task\""),
        "{}",
        err(&o)
    );
}

#[test]
fn a_console_opened_where_there_are_no_pools_names_the_namespace_that_has_them() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let sb = TestSandbox::start();
    sb.kubectl_in_ok(&["apply", "-f", "-"], &crds());
    sb.kubectl_ok(&["create", "namespace", "team-b"]);
    for name in ["one", "two", "three"] {
        let pool = format!(
            "apiVersion: agentdeck.dev/v1alpha1\nkind: AgentPool\nmetadata: {{name: {name}, namespace: team-b}}\nspec: {{image: \"agentdeck:dev\", minReplicas: 0, maxReplicas: 1}}\n"
        );
        eventually_blocking("a pool in team-b", || {
            sb.kubectl_in(&["apply", "-f", "-"], &pool)
                .status
                .success()
                .then_some(())
        });
    }
    let kubeconfig = sb.kubeconfig.display().to_string();
    let t = Tmux::start(
        &["-n", "default", "--read-only"],
        &[("KUBECONFIG", &kubeconfig)],
        140,
        30,
    );
    let s = t.wait_for("3 pools in team-b — agentdeck -n team-b, or -A for every namespace");
    assert!(s.contains("no pools in default yet"), "{s}");
    // Read-only says so as the reason it does not lead.
    assert!(s.contains("this console is read-only: --read-only"), "{s}");
}

/// A daemon on a cluster without the CRDs is not ready, and `/readyz`
/// says why (what is not served, and the command that installs it), not
/// only that its watches have not synced.
#[test]
fn a_daemon_without_the_crds_names_them_in_readyz() {
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let sb = TestSandbox::start();
    sb.kubectl_ok(&["create", "namespace", "agentdeck-system"]);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let home = tempfile::tempdir().expect("temp dir");
    let _daemon = Killed(
        std::process::Command::new(env!("CARGO_BIN_EXE_agentdeck"))
            .arg("--daemon")
            .env("KUBECONFIG", &sb.kubeconfig)
            .env("HOME", home.path())
            .env("XDG_CONFIG_HOME", home.path())
            .env("AGENTDECK_SERVER__PORT", port.to_string())
            .current_dir(home.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("daemon starts"),
    );
    let http = reqwest::Client::new();
    let readyz = || async {
        let r = http
            .get(format!("http://127.0.0.1:{port}/readyz"))
            .send()
            .await
            .ok()?;
        Some((r.status().as_u16(), r.text().await.ok()?))
    };
    let (code, body) = sb.rt.block_on(common::eventually(
        "/readyz naming the AgentPools not served",
        || async {
            readyz()
                .await
                .filter(|(_, b)| b.contains("not served: AgentPool"))
        },
    ));
    assert_eq!(code, 503, "{body}");
    assert!(body.contains(INSTALL), "{body}");
    // Installed: ready, without a restart.
    sb.kubectl_in_ok(&["apply", "-f", "-"], &crds());
    let (_, body) = sb.rt.block_on(common::eventually("/readyz ok", || async {
        readyz().await.filter(|(c, _)| *c == 200)
    }));
    assert_eq!(body, "ok\n");
}
