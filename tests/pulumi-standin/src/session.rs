//! What most commands need first: the project, the backend, the stack and its settings.

use crate::backend::{self, Backend, Checkpoint};
use crate::cli::Parsed;
use crate::crypto::Secrets;
use crate::project::{self, Project, StackFile};
use crate::util::{exit, Failure, Res};
use std::path::PathBuf;

/// `cmdutil.Interactive()`: off with `--non-interactive`, without a TTY, with `TERM=dumb` or in CI.
pub fn interactive(p: &Parsed) -> bool {
    if p.bool("non-interactive") {
        return false;
    }
    // SAFETY: isatty only inspects the descriptors.
    let tty = unsafe { libc::isatty(0) == 1 && libc::isatty(1) == 1 };
    if !tty || std::env::var("TERM").map(|t| t == "dumb").unwrap_or(false) {
        return false;
    }
    ![
        "CI",
        "GITHUB_ACTIONS",
        "GITLAB_CI",
        "BUILD_NUMBER",
        "TF_BUILD",
    ]
    .iter()
    .any(|v| {
        std::env::var(v)
            .map(|x| !x.is_empty() && x != "false")
            .unwrap_or(false)
    })
}

pub fn load_project() -> Res<Project> {
    let cwd = std::env::current_dir()?;
    project::find_project(&cwd)
}

pub fn stack_not_found(name: &str) -> Failure {
    Failure::new(
        exit::STACK_NOT_FOUND,
        format!("no stack named '{name}' found"),
    )
}

pub struct Session {
    pub project: Project,
    pub backend: Backend,
    pub stack: String,
    pub stack_file: StackFile,
    pub checkpoint: Checkpoint,
}

impl Session {
    /// Opens an existing stack: `--stack` (or `explicit`), else the selected stack.
    pub fn open(p: &Parsed, explicit: Option<String>) -> Res<Session> {
        let project = load_project()?;
        let backend = backend::open_backend(Some(&project))?;
        let raw = explicit
            .or_else(|| p.str("stack"))
            .filter(|s| !s.is_empty());
        let stack = match raw {
            Some(r) => {
                let name = backend::parse_stack_ref(&r, &project.name)?;
                if !backend.stack_exists(&project.name, &name) {
                    return Err(stack_not_found(&r));
                }
                name
            }
            None => match backend::selected_stack(&project) {
                Some(s) if backend.stack_exists(&project.name, &s) => s,
                Some(s) => return Err(stack_not_found(&s)),
                None => {
                    return Err(Failure::new(
                        exit::STACK_NOT_FOUND,
                        "no stack selected; specify a stack name with --stack",
                    ))
                }
            },
        };
        let checkpoint = backend.load_checkpoint(&project.name, &stack)?;
        let path = project.stack_file_path(&stack, p.str("config-file").as_deref());
        let stack_file = StackFile::load(&path)?;
        Ok(Session {
            project,
            backend,
            stack,
            stack_file,
            checkpoint,
        })
    }

    /// The passphrase salt: from `Pulumi.<stack>.yaml`, else from the last deployment.
    pub fn salt(&self) -> Option<String> {
        self.stack_file
            .encryption_salt
            .clone()
            .or_else(|| self.checkpoint.salt())
    }

    pub fn secrets(&self) -> Res<Secrets> {
        if let Some(sp) = &self.stack_file.secrets_provider {
            if sp != "passphrase" && sp != "default" {
                return crate::util::err(format!(
                    "secrets provider '{sp}' is not supported by this Pulumi CLI test stand-in (only passphrase)"
                ));
            }
        }
        if self.backend.cloud && self.salt().is_none() {
            // The simulated Cloud's "service" secrets provider needs no passphrase.
            let key = format!("service:organization/{}/{}", self.project.name, self.stack);
            return Ok(Secrets::Ready(crate::crypto::Crypter::from_passphrase(
                &key, b"service",
            )));
        }
        Secrets::from_salt(self.salt().as_deref())
    }

    /// The secrets manager for an operation that may write secrets: like the real CLI, a stack
    /// without any passphrase state gets a new salt (which needs the passphrase).
    pub fn writable_secrets(&mut self) -> Res<Secrets> {
        let sec = self.secrets()?;
        if let Secrets::None = sec {
            let Some(phrase) = crate::crypto::read_passphrase()? else {
                return crate::util::err(crate::crypto::MISSING_PASSPHRASE);
            };
            let (salt, c) = crate::crypto::new_salt_state(&phrase);
            self.stack_file.encryption_salt = Some(salt);
            self.stack_file.save()?;
            return Ok(Secrets::Ready(c));
        }
        Ok(sec)
    }

    /// Restores a missing `encryptionsalt` from the deployment into `Pulumi.<stack>.yaml`.
    pub fn ensure_salt_in_stack_file(&mut self) -> Res<()> {
        if self.stack_file.encryption_salt.is_none() {
            if let Some(s) = self.checkpoint.salt() {
                self.stack_file.encryption_salt = Some(s);
                self.stack_file.save()?;
            }
        }
        Ok(())
    }

    pub fn display_ref(&self) -> String {
        self.backend.display_ref(&self.project.name, &self.stack)
    }

    pub fn stack_json_url(&self) -> String {
        let p: PathBuf = self.backend.stack_path(&self.project.name, &self.stack);
        format!("file://{}", p.display())
    }
}
