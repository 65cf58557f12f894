//! The public Python SDK, `acps-sdk==2.1.0` from PyPI, for the interop tests: a virtualenv
//! under `<target>/aip-venv` (made here if missing; `.ci/run` makes it up front). Where
//! `python3 -m venv` or PyPI is unavailable the tests are skipped with a notice, unless
//! `AIP_REQUIRE_SDK_TEST=1` (set by `.ci/run`), which makes that a failure.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::OnceLock;

const SDK: &str = "acps-sdk==2.1.0";

pub fn required() -> bool {
    std::env::var("AIP_REQUIRE_SDK_TEST").is_ok_and(|v| v == "1")
}

pub fn show(o: &Output) -> String {
    format!(
        "status: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `<target>`: the test binary lives in `<target>/<profile>/deps`.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.ancestors()
        .nth(3)
        .expect("<target>/<profile>/deps/<test>")
        .to_path_buf()
}

/// The venv's python with the SDK and uvicorn, made once per test process; `Err` says why
/// it cannot be had.
pub fn python() -> Result<PathBuf, String> {
    static PY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PY.get_or_init(|| {
        let venv = target_dir().join("aip-venv");
        let python = venv.join("bin").join("python");
        let ready = |py: &Path| {
            Command::new(py)
                .args(["-c", "import acps_sdk.aip.aip_rpc_client, uvicorn, fastapi"])
                .output()
                .is_ok_and(|o| o.status.success())
        };
        if python.exists() && ready(&python) {
            return Ok(python);
        }
        match Command::new("python3")
            .arg("-m")
            .arg("venv")
            .arg(&venv)
            .output()
        {
            Ok(o) if o.status.success() => {}
            Ok(o) => return Err(format!("python3 -m venv failed\n{}", show(&o))),
            Err(e) => return Err(format!("python3 not found: {e}")),
        }
        let o = Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                SDK,
                "uvicorn",
            ])
            .output()
            .map_err(|e| format!("run pip: {e}"))?;
        if !o.status.success() || !ready(&python) {
            return Err(format!("pip install {SDK} uvicorn failed\n{}", show(&o)));
        }
        Ok(python)
    })
    .clone()
}

/// The python to run, or `None` after a notice (a panic when the test is required).
pub fn python_or_skip(test: &str) -> Option<PathBuf> {
    match python() {
        Ok(p) => Some(p),
        Err(why) if required() => panic!("the acps-sdk interop test cannot run: {why}"),
        Err(why) => {
            eprintln!("SKIPPED {test}: {why} (set AIP_REQUIRE_SDK_TEST=1 to make this fatal)");
            None
        }
    }
}

pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/sdk")
        .join(name)
}

/// A child process killed and reaped when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
