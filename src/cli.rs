//! The command line: `serve`, `check`, `demo`, `echo`, `import`, `token`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "fairgate",
    version,
    about = "A fair, multi-tenant rate-limiting gateway"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run the gateway.
    Serve {
        #[arg(short, long, env = "FAIRGATE_CONFIG")]
        config: PathBuf,
    },
    /// Validate a config file: prints `ok` and a summary, or every problem.
    Check {
        #[arg(short, long, env = "FAIRGATE_CONFIG")]
        config: PathBuf,
    },
    /// A self-contained tour on 127.0.0.1:8080 with a built-in echo upstream.
    Demo,
    /// Run only the echo upstream (the demo's and the tests'): it answers
    /// with JSON describing each request. Prints `listening on ADDR`.
    Echo {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// Keep the targets (path and query) of the last 256 requests for
        /// `/__echo/stats`, as the conformance tests read them; off by
        /// default, since query strings may carry secrets.
        #[arg(long)]
        record: bool,
    },
    /// Convert other gateways' configuration into a fairgate policy.
    Import {
        #[command(subcommand)]
        from: ImportFrom,
    },
    /// Print a JWT signed with the config's HS key, for development and tests.
    Token {
        #[arg(short, long, env = "FAIRGATE_CONFIG")]
        config: PathBuf,
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        user: Option<String>,
        #[arg(long)]
        plan: Option<String>,
        /// Lifetime, e.g. 15m, 1h, 1d.
        #[arg(long, default_value = "1h", value_parser = parse_ttl)]
        ttl: std::time::Duration,
    },
    /// Print the CustomResourceDefinition of fairgate's RoutePolicy (the
    /// Gateway API's ExtensionRef filter), as the deploy kit ships it.
    Crd,
}

#[derive(Subcommand)]
pub enum ImportFrom {
    /// Kubernetes Ingress objects annotated for ingress-nginx (and the
    /// controller's ConfigMap): writes a policy and a report, one line per
    /// annotation. Exit 2 when some annotation is not supported.
    IngressNginx(Box<crate::import::Options>),
}

fn parse_ttl(text: &str) -> Result<std::time::Duration, &'static str> {
    crate::config::yaml::parse_duration(text)
}

/// JSON lines on stdout, filtered by `RUST_LOG`. Debug and trace events of
/// dependencies (Pingora, hyper, h2, rustls, redis, ...) print request
/// heads, tokens, cookies and query strings, so they never reach the output,
/// whatever `RUST_LOG` says, unless `FAIRGATE_UNSAFE_WIRE_DEBUG=1`.
pub fn init_logging() {
    use tracing_subscriber::prelude::*;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        EnvFilter::new("info,pingora_core=warn,pingora_proxy=warn,pingora_load_balancing=warn")
    });
    let wire_unlocked = std::env::var("FAIRGATE_UNSAFE_WIRE_DEBUG").as_deref() == Ok("1");
    let no_wire = tracing_subscriber::filter::filter_fn(move |meta| {
        wire_unlocked || *meta.level() < tracing::Level::DEBUG || own_target(meta.target())
    });
    let json = tracing_subscriber::fmt::layer()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_writer(std::io::stdout)
        .with_filter(no_wire);
    tracing_subscriber::registry()
        .with(filter)
        .with(json)
        .init();
}

/// fairgate's own events (its access log among them), not a dependency's.
fn own_target(target: &str) -> bool {
    target == "access" || target == "fairgate" || target.starts_with("fairgate::")
}

/// Runs a command and returns the process exit code.
pub fn main(cli: Cli) -> i32 {
    match cli.command {
        Command::Check { config } => check(&config),
        Command::Serve { config } => serve(&config),
        Command::Demo => demo(),
        Command::Echo { listen, record } => echo(listen, record),
        Command::Import {
            from: ImportFrom::IngressNginx(options),
        } => crate::import::main(&options),
        Command::Token {
            config,
            tenant,
            user,
            plan,
            ttl,
        } => token(&config, &tenant, user.as_deref(), plan.as_deref(), ttl),
        Command::Crd => {
            print!("{}", crd_yaml());
            0
        }
    }
}

fn token(
    path: &Path,
    tenant: &str,
    user: Option<&str>,
    plan: Option<&str>,
    ttl: std::time::Duration,
) -> i32 {
    let loaded = match crate::build::load(path) {
        Ok(loaded) => loaded,
        Err(problems) => {
            eprint!("{problems}");
            return 1;
        }
    };
    let Some(auth) = &loaded.config.auth else {
        eprintln!("{}: no `auth` section to sign with", path.display());
        return 1;
    };
    if !crate::auth::tenant_id_ok(tenant) {
        eprintln!("--tenant must match [A-Za-z0-9._@-]{{1,128}}");
        return 1;
    }
    match crate::auth::mint(auth, tenant, user, plan, ttl) {
        Ok(token) => {
            println!("{token}");
            0
        }
        Err(e) => {
            eprintln!("{}: {e}", path.display());
            1
        }
    }
}

/// Reads the file and loads what it names, as a start or reload would:
/// what `check` accepts is what is served.
pub(crate) fn check(path: &Path) -> i32 {
    match crate::build::load(path) {
        Ok(loaded) => {
            for line in &loaded.warnings {
                println!("{line}");
            }
            println!("ok");
            println!("{}: {}", path.display(), loaded.config.summary());
            0
        }
        Err(problems) => {
            for line in problems.render_errors() {
                println!("{line}");
            }
            1
        }
    }
}

fn serve(path: &Path) -> i32 {
    let loaded = match crate::build::load(path) {
        Ok(loaded) => loaded,
        Err(problems) => {
            for line in problems.render_errors() {
                eprintln!("{line}");
            }
            return 1;
        }
    };
    init_logging();
    for line in &loaded.warnings {
        tracing::warn!(problem = %line, "config.warning");
    }
    match crate::server::run(loaded, Some(path.to_path_buf())) {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!(error = %e, "fairgate.start_failed");
            1
        }
    }
}

const DEMO_CONFIG: &str = include_str!("../config/demo.yaml");

fn demo() -> i32 {
    if std::env::var_os("FAIRGATE_JWT_SECRET").is_none() {
        // Single-threaded here: nothing else reads the environment yet.
        std::env::set_var(
            "FAIRGATE_JWT_SECRET",
            uuid::Uuid::new_v4().simple().to_string(),
        );
    }
    let demo = crate::build::from_text("config/demo.yaml", DEMO_CONFIG, Path::new("."));
    let mut loaded = match demo {
        Ok(loaded) => loaded,
        Err(problems) => {
            eprint!("{problems}");
            return 1;
        }
    };
    let echo = match start_echo() {
        Ok(addr) => addr,
        Err(e) => {
            eprintln!("demo: cannot start the echo upstream: {e}");
            return 1;
        }
    };
    if let Some(api) = loaded.config.upstreams.get_mut("api") {
        api.targets = vec![echo.to_string()];
    }
    let listen = loaded.config.server.listen[0];
    println!(
        "\nfairgate demo: gateway on http://{listen}, echo upstream on {echo}, admin on http://{}\n",
        loaded
            .config
            .admin
            .listen
            .map(|a| a.to_string())
            .unwrap_or_default()
    );
    let token = |tenant: &str, user: &str| {
        let auth = loaded
            .config
            .auth
            .as_ref()
            .expect("the demo config has auth");
        crate::auth::mint(
            auth,
            tenant,
            Some(user),
            None,
            std::time::Duration::from_secs(86_400),
        )
        .expect("the demo secret is set")
    };
    let acme = token("acme", "alice");
    let globex = token("globex", "bob");
    println!("Tokens (valid 24 h):");
    println!("  ACME={acme}        # tenant acme, plan free: 5 back to back, 1 per 2 s");
    println!("  GLOBEX={globex}    # tenant globex, plan pro: 20 back to back, 5/s");
    println!("\nTry:");
    println!("  curl -i -H \"Authorization: Bearer $ACME\" http://{listen}/v1/hello   # 200 with RateLimit headers");
    println!("  for i in $(seq 7); do curl -s -o /dev/null -w '%{{http_code}} ' -H \"Authorization: Bearer $ACME\" http://{listen}/v1/hello; done; echo   # after the curl above: 200 x4, then 429 x3");
    println!("  curl -i -H \"Authorization: Bearer $GLOBEX\" http://{listen}/v1/hello # another tenant is unaffected");
    println!(
        "  curl -i http://{listen}/v1/hello                                      # 401: no token"
    );
    println!("  curl -i http://{listen}/healthz                                       # exempt probe, never limited");
    println!("  curl -s http://127.0.0.1:9090/metrics | grep fairgate_ratelimit");
    println!("\nPress Ctrl-C to stop.\n");
    init_logging();
    match crate::server::run(loaded, None) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("demo: {e}");
            1
        }
    }
}

/// The echo upstream in the foreground, until the process is ended.
fn echo(listen: SocketAddr, record: bool) -> i32 {
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("echo: {e}");
            return 1;
        }
    };
    rt.block_on(async move {
        let stats = Arc::new(crate::echo::Stats {
            record,
            ..Default::default()
        });
        match crate::echo::serve(listen, stats).await {
            Ok(bound) => {
                println!("listening on {bound}");
                std::future::pending::<i32>().await
            }
            Err(e) => {
                eprintln!("echo: cannot listen on {listen}: {e}");
                1
            }
        }
    })
}

/// The echo upstream on its own thread and runtime, on a free loopback port.
fn start_echo() -> std::io::Result<SocketAddr> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("demo-echo".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("tokio runtime");
            rt.block_on(async move {
                let stats = Arc::new(crate::echo::Stats::default());
                let bound = crate::echo::serve("127.0.0.1:0".parse().expect("addr"), stats).await;
                let _ = tx.send(bound);
                std::future::pending::<()>().await;
            });
        })?;
    rx.recv()
        .map_err(|_| std::io::Error::other("echo thread ended"))?
}

/// The `RoutePolicy` CustomResourceDefinition, as YAML.
fn crd_yaml() -> String {
    use kube::CustomResourceExt;
    let crd = crate::k8s::route_policy::RoutePolicy::crd();
    let crd = serde_json::to_value(crd).unwrap_or(serde_json::Value::Null);
    let header = "# Generated by `fairgate crd` from src/k8s/route_policy.rs: do not edit.\n";
    format!(
        "{header}{}",
        crate::import::yaml(&crate::import::json_node(&crd))
    )
}
