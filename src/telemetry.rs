//! Structured logs through `tracing`, as text or JSON.

use crate::runtime::config::{Config, LogFormat};
use tracing_subscriber::EnvFilter;

pub fn init(config: &Config) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(&config.log_level)
        .map_err(|e| anyhow::anyhow!("invalid --log-level {:?}: {e}", config.log_level))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match config.log_format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .init(),
        LogFormat::Text => builder.with_ansi(false).init(),
    }
    Ok(())
}
