//! The process's own metrics, read from `/proc/self` at each scrape under the names every
//! Prometheus client uses (`process_resident_memory_bytes`, `process_cpu_seconds_total`, ...).
//! Elsewhere than on Linux nothing is exported.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use std::fmt;

/// What `/proc/self/stat` tells, in base units.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stat {
    pub cpu_seconds: f64,
    pub threads: i64,
    /// Seconds after boot.
    pub start_after_boot: f64,
    pub virtual_bytes: i64,
    pub resident_bytes: i64,
}

/// Parses `/proc/self/stat`; `ticks` is `sysconf(_SC_CLK_TCK)`, `page` the page size.
pub fn parse_stat(text: &str, ticks: f64, page: i64) -> Option<Stat> {
    // The command name (field 2) is in parentheses and may hold spaces: fields after the last
    // `)` are numbered from 3.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| f.get(n - 3).and_then(|v| v.parse::<i64>().ok());
    Some(Stat {
        cpu_seconds: (field(14)? + field(15)?) as f64 / ticks,
        threads: field(20)?,
        start_after_boot: field(22)? as f64 / ticks,
        virtual_bytes: field(23)?,
        resident_bytes: field(24)?.saturating_mul(page),
    })
}

/// The boot time (Unix seconds) from `/proc/stat`.
pub fn parse_boot_time(text: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The soft limit of open files from `/proc/self/limits`.
pub fn parse_max_fds(text: &str) -> Option<i64> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[derive(Debug, Default)]
pub struct ProcessCollector;

fn gauge(encoder: &mut DescriptorEncoder, name: &str, help: &str, v: f64) -> fmt::Result {
    ConstGauge::new(v).encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

#[cfg(target_os = "linux")]
fn system() -> (f64, i64) {
    // SAFETY: sysconf only reads a configuration value.
    let (ticks, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (
        if ticks > 0 { ticks as f64 } else { 100.0 },
        if page > 0 { page } else { 4096 },
    )
}

impl Collector for ProcessCollector {
    #[cfg(target_os = "linux")]
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let (ticks, page) = system();
        let Some(stat) = parse_stat(&read("/proc/self/stat"), ticks, page) else {
            return Ok(());
        };
        let cpu = encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            None,
            MetricType::Counter,
        )?;
        ConstCounter::new(stat.cpu_seconds).encode(cpu)?;
        let e = &mut encoder;
        gauge(
            e,
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            stat.resident_bytes as f64,
        )?;
        gauge(
            e,
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes",
            stat.virtual_bytes as f64,
        )?;
        gauge(
            e,
            "process_threads",
            "Number of OS threads in the process",
            stat.threads as f64,
        )?;
        if let Some(boot) = parse_boot_time(&read("/proc/stat")) {
            let start = boot + stat.start_after_boot;
            gauge(
                e,
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch in seconds",
                start,
            )?;
        }
        if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
            gauge(
                e,
                "process_open_fds",
                "Number of open file descriptors",
                dir.count() as f64,
            )?;
        }
        if let Some(max) = parse_max_fds(&read("/proc/self/limits")) {
            gauge(
                e,
                "process_max_fds",
                "Maximum number of open file descriptors",
                max as f64,
            )?;
        }
        Ok(())
    }

    #[cfg(not(target_os = "linux"))]
    fn encode(&self, _: DescriptorEncoder) -> fmt::Result {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_proc_files() {
        let stat = "4242 (pulumi oper) S 1 2 3 4 5 6 7 8 9 10 250 150 0 0 20 0 12 0 30000 \
                    104857600 9000 18446744073709551615";
        let s = parse_stat(stat, 100.0, 4096).unwrap();
        assert_eq!(s.cpu_seconds, 4.0);
        assert_eq!(s.threads, 12);
        assert_eq!(s.start_after_boot, 300.0);
        assert_eq!(s.virtual_bytes, 104_857_600);
        assert_eq!(s.resident_bytes, 9000 * 4096);
        assert_eq!(parse_stat("garbage", 100.0, 4096), None);
        assert_eq!(parse_boot_time("cpu 1 2\nbtime 1700000000\n"), Some(1.7e9));
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(parse_max_fds(limits), Some(1024));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn exports_this_process() {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for name in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_start_time_seconds ",
            "process_open_fds ",
            "process_max_fds ",
        ] {
            assert!(text.contains(name), "{name} in {text}");
        }
    }
}
