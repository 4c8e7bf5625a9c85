#![forbid(unsafe_code)]
//! agentdeck: controller, console, agent runtime and API sandbox for
//! self-hosted deployment-agent pools on Kubernetes.

pub mod agent;
pub mod app;
pub mod cli;
pub mod cluster;
pub mod commands;
pub mod config;
pub mod controller;
pub mod crd;
pub mod demo;
pub mod error;
pub mod health;
pub mod install;
pub mod monitoring;
pub mod ops;
pub mod plan;
pub mod redact;
pub mod replay;
pub mod sandbox;
pub mod server;
pub mod signal;
pub mod telemetry;
pub mod text;
pub mod tui;
pub mod ui;
pub mod units;
