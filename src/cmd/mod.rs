//! One module per subcommand.

pub mod publish;
pub mod rules;
pub mod run;
