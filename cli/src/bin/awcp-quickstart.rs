//! `awcp-quickstart`: a complete delegation on this machine with built-in defaults.
//!
//! Starts a local executor (demo runner) on 127.0.0.1, creates a sample project (or uses the
//! directory given), delegates it over real HTTP, applies the result and shows what changed;
//! then says where the sample project is kept and what to try next.
//!
//! ```text
//! cargo run -p awcp-aip-cli --bin awcp-quickstart [-- DIR] [--runtime smol]
//! ```

use std::path::PathBuf;
use std::sync::Arc;

use awcp_aip_cli::RuntimeChoice;
use awcp_driver::{
    DelegateParams, DelegatorHandle, DelegatorOptions, Driver, ExecutorHandle, ExecutorOptions,
};
use awcp_proto::ExecutorConfig;
use awcp_transports::{ArchiveDelegator, ArchiveDelegatorConfig, ArchiveExecutor, DemoRunner};
use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "awcp-quickstart",
    version,
    about = "A complete AWCP delegation on this machine, with built-in defaults"
)]
struct Args {
    /// JSON config file whose keys are flag names (command line, then environment, then file).
    #[arg(long)]
    config: Option<std::path::PathBuf>,
    /// The directory to delegate (default: a sample project in a temporary directory).
    dir: Option<PathBuf>,
    /// Async runtime to run on.
    #[arg(long, env = "AWCP_RUNTIME", value_enum, default_value_t)]
    runtime: RuntimeChoice,
}

fn main() {
    let args: Args = awcp_aip_cli::parse_command(awcp_aip_cli::with_default_env(
        <Args as clap::CommandFactory>::command(),
        "AWCP_QUICKSTART_",
    ));
    awcp_aip_cli::init_logging(true, awcp_aip_cli::LogFormat::Text);
    awcp_aip_cli::run_on!(args.runtime, run(args.dir));
}

async fn run<R: Driver>(dir: Option<PathBuf>) {
    let scratch = tempfile::tempdir().expect("temp dir");
    let sample = dir.is_none();
    let dir: PathBuf = match dir {
        Some(d) => d,
        None => {
            // Kept after the run (the executor's work and the delegator's state are not), so
            // there is something to look at and to delegate again.
            let home = tempfile::Builder::new()
                .prefix("awcp-quickstart-")
                .tempdir()
                .expect("temp dir")
                .keep();
            let d = home.join("sample-project");
            std::fs::create_dir_all(d.join("src")).expect("sample dir");
            std::fs::write(d.join("README.md"), "# Sample project\n").expect("sample file");
            std::fs::write(d.join("src/main.py"), "print('hello')\n").expect("sample file");
            d
        }
    };

    // 1. A local executor on a free loopback port, with the demo runner.
    let work_root = scratch.path().join("executor-work");
    let engine = ExecutorConfig {
        work_root: work_root.to_string_lossy().into_owned(),
        ..ExecutorConfig::default()
    };
    let executor = ExecutorHandle::start(
        R::default(),
        ExecutorOptions::new(
            engine,
            Arc::new(ArchiveExecutor::default()),
            Arc::new(DemoRunner),
        ),
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    executor.set_public_url(format!("http://{addr}"));
    R::default().spawn_executor_server(listener, executor.clone());
    let peer = format!("http://{addr}/awcp");
    println!("executor: {peer}");
    println!("workspace: {}", dir.display());

    // 2. A delegator, in-process.
    let state = scratch.path().join("delegator");
    let transport = ArchiveDelegator::new(ArchiveDelegatorConfig::new(state.join("exports")));
    let delegator = DelegatorHandle::start(
        R::default(),
        DelegatorOptions::new(Arc::new(transport), state),
    );

    // 3. Delegate, follow progress, wait for the applied result.
    let follow = awcp_aip_cli::Follow::subscribe(&delegator);
    let params = DelegateParams::new(
        peer,
        dir.clone(),
        "Write an inventory of the files into AWCP_NOTES.md.",
    )
    .description("List the project");
    let id = match delegator.delegate(params).await {
        Ok(id) => id,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    let view = follow
        .until_end(&delegator, &id, false, std::future::pending())
        .await;
    let Some(view) = view else {
        eprintln!("error: the delegation disappeared");
        std::process::exit(1);
    };
    print!("{}", awcp_aip_cli::describe(&view));
    let notes = dir.join(awcp_transports::runner::NOTES_FILE);
    match std::fs::read_to_string(&notes) {
        Ok(text) => println!(
            "\n--- {} (written by the executor, applied locally) ---\n{text}",
            notes.display()
        ),
        Err(_) => println!("\n(no {} in the workspace)", notes.display()),
    }
    executor.shutdown().await;
    if view.state != awcp_proto::DelegationState::Completed {
        std::process::exit(3);
    }
    if sample {
        println!("The sample project is kept at {}", dir.display());
    }
    let d = dir.display();
    println!(
        "\nNext:\n\
         \x20 an executor that runs a real agent (README, \"Recipes\" for Claude Code, Codex, Aider):\n\
         \x20   awcp-executor --listen 127.0.0.1:10200 --agent-cmd 'sh -c \"echo done > DONE.txt\"'\n\
         \x20 delegate this project to it, reviewing the result before it is applied:\n\
         \x20   awcp delegate {d} --peer http://127.0.0.1:10200/awcp --prompt 'add a test' --snapshot-mode staged\n\
         \x20 then `awcp diff`, `awcp apply` or `awcp discard` as it prints; `awcp-mcp` gives the\n\
         \x20 same to an MCP client (README, \"MCP\").\n\
         \x20 or watch and review in a browser: `awcp daemon &`, then `awcp delegate … --daemon`\n\
         \x20 and `awcp dashboard` (README, \"The dashboard\")."
    );
}
