//! One module per subcommand.

pub mod alerts;
pub mod bench;
pub mod completions;
pub mod dead;
pub mod deliveries;
pub mod doctor;
pub mod explain;
pub mod invalid;
pub mod mute;
pub mod namespace;
pub mod notices;
pub mod probe;
pub mod projects;
pub mod publish;
pub mod rules;
pub mod run;
pub mod test_notify;
pub mod webhook;
