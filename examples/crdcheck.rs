fn main() { for c in agentdeck::crd::crds() { println!("{}", serde_json::to_string_pretty(&c).unwrap()); } }
