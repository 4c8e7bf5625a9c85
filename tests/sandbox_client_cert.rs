//! The sandbox's kubeconfig offers the admin as a client certificate too
//! (context `agentdeck-sandbox-cert`: CN the admin, O `system:masters`,
//! signed by the sandbox CA), for clients that build their own TLS stack
//! without a bearer-token layer; a certificate the CA did not sign gets
//! nothing.

mod common;

use common::{TestSandbox, err};
use k8s_openapi::api::core::v1::Namespace;

#[test]
fn kubectl_with_only_the_client_certificate_is_the_admin() {
    let sb = TestSandbox::start();
    let cert = agentdeck::sandbox::CERT_CONTEXT;
    let whoami = sb.kubectl(&["--context", cert, "auth", "whoami", "-o", "json"]);
    assert!(whoami.status.success(), "{}", err(&whoami));
    let review: serde_json::Value = serde_json::from_slice(&whoami.stdout).expect("json");
    assert_eq!(
        review["status"]["userInfo"]["username"],
        agentdeck::sandbox::auth::ADMIN_USER,
        "{review}"
    );
    let groups = review["status"]["userInfo"]["groups"].to_string();
    assert!(groups.contains("system:masters"), "{groups}");
    sb.kubectl_ok(&["--context", cert, "create", "namespace", "by-cert"]);
    assert!(
        sb.kubectl_ok(&["get", "ns", "by-cert", "-o", "name"])
            .contains("by-cert")
    );

    // No token in the kubeconfig user, and none sent.
    let kubeconfig = std::fs::read_to_string(&sb.kubeconfig).expect("kubeconfig");
    let user = kubeconfig
        .split("- name: ")
        .find(|u| u.starts_with(&format!("{cert}\n  user:")))
        .expect("the certificate user");
    assert!(
        user.contains("client-certificate-data: ") && !user.contains("token"),
        "{user}"
    );
}

#[test]
fn kube_rs_with_only_the_client_certificate_is_the_admin() {
    let sb = TestSandbox::start();
    let rt = &sb.rt;
    rt.block_on(async {
        let kubeconfig = kube::config::Kubeconfig::read_from(&sb.kubeconfig).expect("kubeconfig");
        let options = kube::config::KubeConfigOptions {
            context: Some(agentdeck::sandbox::CERT_CONTEXT.to_owned()),
            ..Default::default()
        };
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .expect("config");
        assert!(config.auth_info.token.is_none());
        assert!(config.auth_info.client_certificate_data.is_some());
        let client = kube::Client::try_from(config).expect("client");
        let namespaces: kube::Api<Namespace> = kube::Api::all(client.clone());
        let list = namespaces
            .list(&Default::default())
            .await
            .expect("listed as the admin");
        assert!(
            list.items
                .iter()
                .any(|n| n.metadata.name.as_deref() == Some("default"))
        );

        // A certificate of another CA is not accepted: 401 for its requests.
        let other = agentdeck::sandbox::auth::Security::generate().expect("another PKI");
        let mut config = kube::Config::new(sb.sandbox().url().parse().expect("url"));
        config.root_cert = Some(agentdeck::sandbox::tls::ca_ders(sb.sandbox().ca_pem()));
        config.auth_info.client_certificate_data = Some(base64_of(other.pki().admin_cert_pem()));
        config.auth_info.client_key_data = Some(base64_of(other.pki().admin_key_pem()).into());
        let refused = match kube::Client::try_from(config) {
            Ok(client) => kube::Api::<Namespace>::all(client)
                .list(&Default::default())
                .await
                .is_err(),
            Err(_) => true,
        };
        assert!(refused, "a certificate of another CA was accepted");
    });
}

fn base64_of(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}
