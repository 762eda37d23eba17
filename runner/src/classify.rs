//! Failure classification from Pulumi's exit code and output (what the real CLI prints).
//!
//! Output is observed line by line while it streams ([`Observed::line`]), so classification
//! works whatever the size of the output; [`classify`] is a pure function of what was seen.

use pulumi_operator_api::plan::FailureReason;
use std::collections::VecDeque;

/// Which stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// A pattern of the contract, found in some output line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Pattern {
    /// `[409] Conflict: Another update is currently in progress.` (Cloud) or
    /// `the stack is currently locked by` (DIY lock).
    Conflict,
    /// `no stack named '…' found`.
    StackNotFound,
    /// `no changes were expected for … but changes were proposed`.
    ExpectedNoChanges,
    /// `invalid access token`, `this command requires logging in`,
    /// `PULUMI_ACCESS_TOKEN must be set for login during non-interactive CLI sessions`.
    AccessToken,
    /// `update canceled` / `preview canceled` (graceful), `update cancelled` (hard stop), and the
    /// signal notices (`… received; cancelling`, `… received; terminating`).
    Cancelled,
    /// The pre-3.29 blocking text `… resource(s) with pending operations:` on an error line.
    PendingOperations,
    /// On stdout: `Build FAILED.`, `: syntax error:`, `: undefined:`,
    /// `Unable to compile TypeScript` (compilation) or `failed with an unhandled exception:`,
    /// `panic: runtime error:`, `an unhandled error occurred:` (program runtime errors).
    ProgramError,
    /// `passphrase must be set with PULUMI_CONFIG_PASSPHRASE…` or `incorrect passphrase`.
    Passphrase,
    /// The CLI could not load or configure a policy pack (`--policy-pack`): see
    /// [`is_policy_pack_error`].
    PolicyPack,
}

const ERROR_LINES: usize = 8;
const MAX_LINE: usize = 1000;

/// What was seen in the output of one command.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    patterns: Vec<Pattern>,
    /// The last `error:` lines (either stream), without ANSI codes.
    errors: VecDeque<String>,
    /// The first permalink (`View Live: `, `View in Browser…: `, `Permalink: ` on stdout).
    pub permalink: Option<String>,
    /// The error entry that the next, more indented lines continue (multi-line provider
    /// errors, the YAML host's `Error:` with its source location).
    open: Option<OpenError>,
    /// The first lines in which a package manager or compiler reports its error (npm, yarn,
    /// pnpm, pip, tsc, go, a Python traceback's last line): what `pulumi install` failed on.
    tool_errors: Vec<String>,
    /// The first line in which the CLI says it cannot load or configure a policy pack.
    policy_pack_error: Option<String>,
}

/// At most this many of a package manager's or compiler's error lines are kept.
const TOOL_ERROR_LINES: usize = 5;
const MAX_TOOL_LINE: usize = 300;

/// A line in which a package manager or compiler reports an error, in its own words.
fn is_tool_error(text: &str) -> bool {
    const PREFIXES: [&str; 9] = [
        "npm error ",
        "npm ERR! ",
        "ERR_PNPM_",
        "ERROR: ",
        "error TS",
        "ModuleNotFoundError: ",
        "ImportError: ",
        "SyntaxError: ",
        "go: ",
    ];
    // npm's and pip's own noise about the failure, not its cause.
    const NOISE: [&str; 5] = [
        "A complete log of this run can be found in",
        "npm error code ",
        "[notice]",
        "go: downloading ",
        "go: finding ",
    ];
    (PREFIXES.iter().any(|p| text.starts_with(p))
        || (text.starts_with("error ") && !text.starts_with("error: ")))
        && !NOISE.iter().any(|n| text.contains(n))
        && text.len() > "npm error ".len() + 3
}

/// An error entry that may go on over the following lines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct OpenError {
    /// The indentation of its first line; continuation lines are indented more.
    indent: usize,
    /// The YAML host's `Error:` blocks keep going over blank lines.
    over_blank_lines: bool,
    lines: usize,
}

/// At most this many continuation lines and characters per error entry.
const MAX_CONTINUATION_LINES: usize = 8;
const MAX_ENTRY: usize = 2000;

/// The patterns of the contract in one line (trimmed, without ANSI codes), in a fixed order.
fn patterns_in(stream: Stream, text: &str) -> Vec<Pattern> {
    let mut found = Vec::new();
    let mut see = |p: Pattern| found.push(p);
    if text.contains("Conflict: Another update is currently in progress")
        || text.contains("the stack is currently locked by")
    {
        see(Pattern::Conflict);
    }
    if let Some(i) = text.find("no stack named") {
        if text[i..].contains("found") {
            see(Pattern::StackNotFound);
        }
    }
    if let Some(i) = text.find("no changes were expected for") {
        if text[i..].contains("but changes were proposed") {
            see(Pattern::ExpectedNoChanges);
        }
    }
    if text.contains("invalid access token")
        || text.contains("this command requires logging in")
        || text.contains(
            "PULUMI_ACCESS_TOKEN must be set for login during non-interactive CLI sessions",
        )
    {
        see(Pattern::AccessToken);
    }
    if text.contains("update canceled")
        || text.contains("preview canceled")
        || text.contains("refresh canceled")
        || text.contains("destroy canceled")
        || text.contains("update cancelled")
        || text.contains("received; cancelling")
        || text.contains("received; terminating")
    {
        see(Pattern::Cancelled);
    }
    if text.contains("error:") && text.contains("with pending operations") {
        see(Pattern::PendingOperations);
    }
    if stream == Stream::Stdout
        && (text.contains("Build FAILED.")
            || text.contains(": syntax error:")
            || text.contains(": undefined:")
            || text.contains("Unable to compile TypeScript")
            || text.contains("failed with an unhandled exception:")
            || text.contains("panic: runtime error:")
            || text.contains("an unhandled error occurred:"))
    {
        see(Pattern::ProgramError);
    }
    // A project file the CLI cannot read (the real CLI says so on stderr, exit 1).
    if text.contains("error: could not unmarshal '") && text.contains("invalid YAML file") {
        see(Pattern::ProgramError);
    }
    if text.contains("passphrase must be set with PULUMI_CONFIG_PASSPHRASE")
        || text.contains("incorrect passphrase")
    {
        see(Pattern::Passphrase);
    }
    // Pulumi YAML reports a program that does not evaluate as `Error: …` (stderr).
    if text.starts_with("Error: ") {
        see(Pattern::ProgramError);
    }
    if is_policy_pack_error(text) {
        see(Pattern::PolicyPack);
    }
    found
}

/// A line in which the CLI (3.259, `pkg/engine/update.go`, `pkg/resource/plugin/
/// analyzer_plugin.go`) says it cannot load, start or configure a policy pack.
fn is_policy_pack_error(text: &str) -> bool {
    const MARKS: [&str; 9] = [
        "failed to load Pulumi policy project",
        "it looks like the policy pack's dependencies are not installed",
        "policy pack not found at",
        "could not start policy pack",
        "policy analyzer could not be loaded from path",
        "validating policy config for",
        "reconciling policy config for",
        "configuring policy pack",
        "failed to automatically install analyzer plugin",
    ];
    MARKS.iter().any(|m| text.contains(m))
        || text.find("policy pack \"").is_some_and(|i| {
            let rest = &text[i..];
            rest.contains("failed to start") || rest.contains("does not support config")
        })
}

/// The permalink a stdout line announces, if any.
fn permalink_in(line: &str) -> Option<String> {
    for prefix in [
        "View Live: ",
        "View in Browser (Ctrl+O): ",
        "View in Browser: ",
        "Permalink: ",
    ] {
        if let Some(i) = line.find(prefix) {
            let url = line[i + prefix.len()..].trim();
            return (!url.is_empty()).then(|| url.to_string());
        }
    }
    None
}

impl Observed {
    /// Observes one line (without its newline).
    pub fn line(&mut self, stream: Stream, raw: &str) {
        let line = strip_ansi(raw);
        let text = line.trim();
        for p in patterns_in(stream, text) {
            if !self.patterns.contains(&p) {
                self.patterns.push(p);
            }
        }
        if stream == Stream::Stdout && self.permalink.is_none() {
            self.permalink = permalink_in(&line);
        }
        if self.policy_pack_error.is_none() && is_policy_pack_error(text) {
            let line = text.trim_start_matches("error:").trim();
            self.policy_pack_error = Some(truncated(line, MAX_LINE));
        }
        if self.tool_errors.len() < TOOL_ERROR_LINES && is_tool_error(text) {
            let kept = truncated(text, MAX_TOOL_LINE);
            if !self.tool_errors.contains(&kept) {
                self.tool_errors.push(kept);
            }
        }
        let indent = line.len() - line.trim_start().len();
        // The YAML host's `Error: …` opens an entry too (see `patterns_in`).
        let yaml_error = text.starts_with("Error: ");
        if text.starts_with("error:") || yaml_error {
            self.open_error(text, indent, yaml_error);
        } else {
            self.continue_error(text, indent);
        }
    }

    /// An `error:` line (or the YAML host's `Error:`): a new entry, unless already seen.
    fn open_error(&mut self, text: &str, indent: usize, yaml_error: bool) {
        let msg = truncated(text, MAX_LINE);
        self.open = None;
        if !self.errors.contains(&msg) {
            if self.errors.len() == ERROR_LINES {
                self.errors.pop_front();
            }
            self.errors.push_back(msg);
            self.open = Some(OpenError {
                indent,
                over_blank_lines: yaml_error,
                lines: 0,
            });
        }
    }

    /// Another line: part of the open error entry when indented more than its first line.
    fn continue_error(&mut self, text: &str, indent: usize) {
        let Some(open) = self.open.as_mut() else {
            return;
        };
        if text.is_empty() {
            if !open.over_blank_lines {
                self.open = None;
            }
            return;
        }
        if indent <= open.indent || open.lines >= MAX_CONTINUATION_LINES {
            self.open = None;
            return;
        }
        // A continuation line of the last error: kept, so that the message reads as printed.
        if let Some(last) = self.errors.back_mut() {
            if last.len() + text.len() < MAX_ENTRY {
                last.push('\n');
                last.push_str(&truncated(text, MAX_LINE));
                open.lines += 1;
            }
        }
    }

    /// Observes a whole text (tests, captured output).
    pub fn text(&mut self, stream: Stream, text: &str) {
        for l in text.lines() {
            self.line(stream, l);
        }
    }

    pub fn saw(&self, p: Pattern) -> bool {
        self.patterns.contains(&p)
    }

    /// Adds what another stream saw.
    pub fn merge(&mut self, other: Observed) {
        for p in other.patterns {
            if !self.patterns.contains(&p) {
                self.patterns.push(p);
            }
        }
        for e in other.errors {
            if !self.errors.contains(&e) {
                if self.errors.len() == ERROR_LINES {
                    self.errors.pop_front();
                }
                self.errors.push_back(e);
            }
        }
        if self.permalink.is_none() {
            self.permalink = other.permalink;
        }
        if self.policy_pack_error.is_none() {
            self.policy_pack_error = other.policy_pack_error;
        }
        for e in other.tool_errors {
            if self.tool_errors.len() < TOOL_ERROR_LINES && !self.tool_errors.contains(&e) {
                self.tool_errors.push(e);
            }
        }
    }

    /// The CLI's line saying that it cannot load or configure a policy pack, if it printed one.
    pub fn policy_pack_error(&self) -> Option<&str> {
        self.policy_pack_error.as_deref()
    }

    /// The first lines of a package manager's or compiler's own error, one per line.
    pub fn tool_error_summary(&self) -> String {
        self.tool_errors.join("\n")
    }

    /// The most telling error lines, for a failure message: generic closing lines
    /// (`error: update failed`) are dropped when something more specific was printed.
    pub fn error_summary(&self) -> String {
        let generic = |e: &str| {
            let t = e.trim_start_matches("error:").trim();
            matches!(
                t,
                "update failed" | "preview failed" | "refresh failed" | "destroy failed"
            )
        };
        let specific: Vec<&str> = self
            .errors
            .iter()
            .map(String::as_str)
            .filter(|e| !generic(e))
            .collect();
        let chosen: Vec<&str> = if specific.is_empty() {
            self.errors.iter().map(String::as_str).collect()
        } else {
            specific
        };
        chosen
            .iter()
            .rev()
            .take(4)
            .rev()
            .map(|e| {
                e.trim_start_matches("error:")
                    .trim_start_matches("Error:")
                    .trim()
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// `text` cut to at most `max` bytes (at a character boundary), marked with `...`.
fn truncated(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &text[..cut])
}

/// Classifies a failed command. `interrupted` is true when the runner forwarded a signal.
pub fn classify(exit_code: Option<i32>, seen: &Observed, interrupted: bool) -> FailureReason {
    use FailureReason::*;
    if interrupted {
        return Interrupted;
    }
    if seen.saw(Pattern::Conflict) {
        return UpdateConflict;
    }
    if exit_code == Some(6) || seen.saw(Pattern::StackNotFound) {
        return StackNotFound;
    }
    if exit_code == Some(7) || seen.saw(Pattern::ExpectedNoChanges) {
        return ExpectedNoChanges;
    }
    if exit_code == Some(3) || seen.saw(Pattern::AccessToken) {
        return InvalidAccessToken;
    }
    if exit_code == Some(8) || seen.saw(Pattern::Cancelled) || exit_code.is_none() {
        // No exit code: the CLI was killed by a signal.
        return Interrupted;
    }
    // Nothing runs without the administrator's packs: that is what failed, whatever follows.
    if seen.saw(Pattern::PolicyPack) {
        return PolicyPackFailed;
    }
    if seen.saw(Pattern::PendingOperations) {
        return PendingOperations;
    }
    if seen.saw(Pattern::ProgramError) {
        return CompileError;
    }
    if seen.saw(Pattern::Passphrase) {
        return ConfigInvalid;
    }
    UpdateFailed
}

/// Removes ANSI escape sequences (CSI and OSC) from a line.
pub fn strip_ansi(s: &str) -> String {
    if !s.contains('\u{1b}') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            Some('[') => {
                chars.next();
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            Some(']') => {
                chars.next();
                while let Some(c) = chars.next() {
                    if c == '\u{7}' {
                        break;
                    }
                    if c == '\u{1b}' && chars.peek() == Some(&'\\') {
                        chars.next();
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tool_error_tests {
    use super::*;

    #[test]
    fn an_npm_failure_keeps_npm_s_own_first_lines_and_drops_its_noise() {
        let mut seen = Observed::default();
        seen.text(
            Stream::Stderr,
            "npm error code E404
npm error 404 Not Found - GET https://registry.npmjs.org/@pulumi%2fno-such-package - Not found
npm error 404
npm error 404  '@pulumi/no-such-package@1.0.0' is not in this registry.
npm error A complete log of this run can be found in: /home/pulumi/.npm/_logs/x.log
error: installing dependencies: npm install failed: exit status 1",
        );
        let summary = seen.tool_error_summary();
        assert_eq!(
            summary,
            "npm error 404 Not Found - GET https://registry.npmjs.org/@pulumi%2fno-such-package - Not found
npm error 404  '@pulumi/no-such-package@1.0.0' is not in this registry."
        );
    }

    #[test]
    fn pip_tsc_and_python_errors_are_recognised() {
        let mut seen = Observed::default();
        seen.text(
            Stream::Stdout,
            "Collecting pulumi==3.272.0
ERROR: Could not find a version that satisfies the requirement nope==9 (from versions: none)
index.ts(3,1): error TS1005: ';' expected.
ModuleNotFoundError: No module named 'pulumi_nope'
[notice] A new release of pip is available",
        );
        let summary = seen.tool_error_summary();
        assert!(
            summary.starts_with("ERROR: Could not find a version"),
            "{summary}"
        );
        assert!(
            !summary.contains("error TS"),
            "only at a line's start: {summary}"
        );
        assert!(
            summary.contains("No module named 'pulumi_nope'"),
            "{summary}"
        );
        assert!(!summary.contains("notice"), "{summary}");
        let mut many = Observed::default();
        for i in 0..20 {
            many.line(
                Stream::Stderr,
                &format!("npm error line {i} of the failure"),
            );
        }
        assert_eq!(many.tool_error_summary().lines().count(), TOOL_ERROR_LINES);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use FailureReason::*;

    fn seen(stdout: &str, stderr: &str) -> Observed {
        let mut o = Observed::default();
        o.text(Stream::Stdout, stdout);
        let mut e = Observed::default();
        e.text(Stream::Stderr, stderr);
        o.merge(e);
        o
    }

    #[test]
    fn classification_table() {
        // (exit code, stdout, stderr, interrupted by the runner, expected)
        let cases: &[(Option<i32>, &str, &str, bool, FailureReason)] = &[
            // Cloud conflict, exit 1 (255 before 3.227).
            (Some(1), "Updating (org/proj/dev)\n\n", "error: [409] Conflict: Another update is currently in progress.\nTo learn more about possible reasons and resolution, visit https://www.pulumi.com/docs/support/troubleshooting/common-issues/update-conflicts/\n", false, UpdateConflict),
            (Some(255), "", "error: [409] Conflict: Another update is currently in progress.\n", false, UpdateConflict),
            // DIY lock.
            (Some(1), "", "error: the stack is currently locked by 1 lock(s). Either wait for the other process(es) to end or delete the lock file with `pulumi cancel`.\n  file:///state/.pulumi/locks/organization/p/dev/x.json: created by u@h (pid 1) at 2026-01-01T00:00:00Z\n", false, UpdateConflict),
            (Some(6), "", "error: no stack named 'dev' found\n", false, StackNotFound),
            (Some(255), "", "error: no stack named 'org/p/dev' found\n", false, StackNotFound),
            (Some(6), "", "error: no stack selected; specify a stack name with --stack\n", false, StackNotFound),
            (Some(7), "", "error: no changes were expected for update but changes were proposed\n", false, ExpectedNoChanges),
            (Some(255), "", "error: no changes were expected for refresh but changes were proposed\n", false, ExpectedNoChanges),
            (Some(3), "", "error: PULUMI_ACCESS_TOKEN must be set for login during non-interactive CLI sessions\n", false, InvalidAccessToken),
            (Some(255), "", "error: this command requires logging in; try running `pulumi login` first\n", false, InvalidAccessToken),
            (Some(1), "", "error: [401] invalid access token\n", false, InvalidAccessToken),
            // Graceful cancel after the runner forwarded SIGINT: exit 1.
            (Some(1), "^C received; cancelling. If you would like to terminate immediately, press ^C again.\n", "error: update canceled\n", true, Interrupted),
            // Cancel without the runner's signal; hard stop (exit 8); killed.
            (Some(1), "    error: update canceled\n", "", false, Interrupted),
            (Some(8), "", "error: update cancelled\n", false, Interrupted),
            (None, "", "", false, Interrupted),
            // Pre-3.29 pending operations.
            (Some(255), "", "error: the current deployment has 1 resource(s) with pending operations:\n  * urn:pulumi:dev::p::t::r, interrupted while creating\n", false, PendingOperations),
            // Compilation / runtime errors are matched on stdout.
            (Some(1), "    error: Running program '/w' failed with an unhandled exception:\n    TypeError: x is not a function\n", "", false, CompileError),
            (Some(1), "main.go:5:2: undefined: foo\n", "", false, CompileError),
            (Some(1), "    ./main.go:5:2: syntax error: unexpected }\n", "", false, CompileError),
            (Some(1), "", "./main.go:5:2: undefined: foo\n", false, UpdateFailed),
            (Some(1), "    error: an unhandled error occurred: program failed\n", "", false, CompileError),
            (Some(1), "Build FAILED.\n", "", false, CompileError),
            (Some(1), "    error: Unable to compile TypeScript:\n    index.ts(1,1): error TS1005\n", "", false, CompileError),
            (Some(1), "panic: runtime error: index out of range\n", "", false, CompileError),
            // The real CLI 3.259 on a Pulumi.yaml that is not YAML.
            (Some(1), "", "error: could not unmarshal '/w/Pulumi.yaml': invalid YAML file: yaml: line 2: did not find expected ',' or ']'\n", false, CompileError),
            // The CLI's own panic goes to stderr: not a program error.
            (Some(1), "", "panic: runtime error: nil pointer\nThe Pulumi CLI encountered a fatal error. This is a bug!\n", false, UpdateFailed),
            (Some(2), "", "error: passphrase must be set with PULUMI_CONFIG_PASSPHRASE or PULUMI_CONFIG_PASSPHRASE_FILE environment variables\n", false, ConfigInvalid),
            (Some(1), "", "error: failed to decrypt: incorrect passphrase, please set PULUMI_CONFIG_PASSPHRASE to the correct passphrase\n", false, ConfigInvalid),
            // Resource failures.
            (Some(1), "    error: standin:index:Fail failed as requested\n    error: update failed\n", "", false, UpdateFailed),
            // Policy packs the CLI cannot load or configure (3.259's own words).
            (Some(1), "", "error: failed to load Pulumi policy project located at \"/var/run/pulumi-operator/policy-packs/a\": no such file or directory\n", false, PolicyPackFailed),
            (Some(1), "", "error: policy pack \"/var/run/pulumi-operator/policy-packs/a\" failed to start: exit status 1\n", false, PolicyPackFailed),
            (Some(1), "", "error: it looks like the policy pack's dependencies are not installed; try running npm install or yarn install in \"/p/a\"\n", false, PolicyPackFailed),
            (Some(1), "", "error: policy pack not found at \"/p/a\"\n", false, PolicyPackFailed),
            (Some(1), "", "error: validating policy config for \"k8s-limits\": bad\n", false, PolicyPackFailed),
            (Some(1), "", "error: policy pack \"k8s-limits\" at \"/p/a\" does not support config\n", false, PolicyPackFailed),
            // A mandatory violation is not a pack failure (the runner reads the event log).
            (Some(1), "Policies:\n    ❌ k8s-limits@v0.1.0 (local: /p/a)\n        - [mandatory]  deployment-resource-limits  (kubernetes:apps/v1:Deployment: app)\n", "error: preview failed\n", false, UpdateFailed),
            (Some(2), "", "error: --yes or --skip-preview or --preview-only must be passed in to proceed when running in non-interactive mode\n", false, UpdateFailed),
        ];
        for (i, (code, out, err, intr, want)) in cases.iter().enumerate() {
            let got = classify(*code, &seen(out, err), *intr);
            assert_eq!(got, *want, "case {i}: {code:?} {out:?} {err:?}");
        }
    }

    #[test]
    fn the_policy_pack_line_is_kept() {
        let s = seen(
            "",
            "\u{1b}[31merror:\u{1b}[0m policy pack \"/var/run/pulumi-operator/policy-packs/a\" failed to start: exit status 1\nerror: preview failed\n",
        );
        assert_eq!(
            s.policy_pack_error(),
            Some("policy pack \"/var/run/pulumi-operator/policy-packs/a\" failed to start: exit status 1")
        );
        assert_eq!(seen("error: update failed\n", "").policy_pack_error(), None);
    }

    #[test]
    fn go_undefined_needs_the_colon_form() {
        // `: undefined:` as in `main.go:5:2: undefined: foo` is matched on stdout.
        let s = seen("# proj\n./main.go:5:2: x: undefined: foo\n", "");
        assert!(s.saw(Pattern::ProgramError));
    }

    #[test]
    fn permalink_and_error_summary() {
        let s = seen(
            "Updating (org/p/dev)\n\nView Live: https://app.pulumi.com/org/p/dev/updates/3\n\n    error: boom\n    error: update failed\n",
            "error: update failed\n",
        );
        assert_eq!(
            s.permalink.as_deref(),
            Some("https://app.pulumi.com/org/p/dev/updates/3")
        );
        assert_eq!(s.error_summary(), "boom");
        let s = seen(
            "Permalink: file:///s/.pulumi/stacks/p/dev.json\n",
            "error: update failed\n",
        );
        assert_eq!(
            s.permalink.as_deref(),
            Some("file:///s/.pulumi/stacks/p/dev.json")
        );
        assert_eq!(s.error_summary(), "update failed");
        let colored = seen("\u{1b}[31merror:\u{1b}[0m red\n", "");
        assert_eq!(colored.error_summary(), "red");
    }

    #[test]
    fn multi_line_errors_keep_their_continuation_lines() {
        // A provider's error that goes on over indented lines, then the engine's closing line.
        let s = seen(
            "  kubernetes:core/v1:ConfigMap (bad):\n    error: 2 errors occurred:\n    \t* metadata.name: Invalid value: \"Bad_Name\"\n    \t* data[bad key]: Invalid value: \"bad key\"\n\n  pulumi:pulumi:Stack (p-dev):\n    error: update failed\n",
            "",
        );
        assert_eq!(
            s.error_summary(),
            "2 errors occurred:\n* metadata.name: Invalid value: \"Bad_Name\"\n* data[bad key]: Invalid value: \"bad key\""
        );
        // Pulumi YAML's diagnostics: `Error:` (coloured), a blank line, the source location.
        let s = seen(
            "",
            "\u{1b}[31mError\u{1b}[0m: resource, variable, or config value \"nope\" not found\n\n  on Pulumi.yaml line 7:\n   7:       v: ${nope.x}\n\npulumi-runner: failed\n",
        );
        assert!(s.saw(Pattern::ProgramError));
        assert_eq!(
            s.error_summary(),
            "resource, variable, or config value \"nope\" not found\non Pulumi.yaml line 7:\n7:       v: ${nope.x}"
        );
        assert_eq!(classify(Some(1), &s, false), FailureReason::CompileError);
    }

    #[test]
    fn ansi_is_stripped() {
        assert_eq!(strip_ansi("\u{1b}[1;31mx\u{1b}[0m y"), "x y");
        assert_eq!(
            strip_ansi("\u{1b}]8;;http://a\u{7}link\u{1b}]8;;\u{7}"),
            "link"
        );
        assert_eq!(strip_ansi("plain"), "plain");
    }
}
