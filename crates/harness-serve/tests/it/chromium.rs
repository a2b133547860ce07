//! The web chat page in a real browser: Debian's headless `chromium`, driven over the
//! DevTools protocol (CDP) on a WebSocket. The page is loaded from the gateway, a message is
//! typed and sent, and the DOM is polled until the streamed reply and a collapsed tool call
//! appear; a second scenario answers an approval with the page's button.
//!
//! These tests fail (never skip) when `chromium` is missing: `scripts/chromium.sh` installs it.

use super::support::{ASK_LIST, Server};
use futures::{SinkExt, StreamExt};
use harness_serve::ServeOptions;
use serde_json::{Value, json};
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

/// How long the browser may take to start or the page to show something before the test
/// fails (a bound against hanging, not a performance check).
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A headless chromium; its whole process group is killed on drop, and its profile folder
/// (which also holds its temporary files) removed once every process of the group is gone.
pub struct Browser {
    child: tokio::process::Child,
    _profile: tempfile::TempDir,
    port: u16,
}

impl Browser {
    pub async fn launch() -> Self {
        // Named so scripts/test.sh can tell a profile a run left behind.
        let profile = tempfile::Builder::new().prefix("harness-chromium-").tempdir().unwrap();
        let scratch = profile.path().join("tmp");
        std::fs::create_dir(&scratch).unwrap();
        let child = tokio::process::Command::new("chromium")
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            // Its singleton socket folder and other temporary files go inside the profile,
            // not into /tmp where a killed browser would leave them.
            .env("TMPDIR", &scratch)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .expect("cannot start `chromium`: install it with scripts/chromium.sh (Debian package `chromium`)");
        let port_file = profile.path().join("DevToolsActivePort");
        let port = tokio::time::timeout(PATIENCE, async {
            loop {
                if let Ok(text) = std::fs::read_to_string(&port_file)
                    && text.lines().count() >= 2
                    && let Ok(port) = text.lines().next().unwrap_or_default().parse::<u16>()
                {
                    return port;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .expect("chromium did not write DevToolsActivePort");
        Self {
            child,
            _profile: profile,
            port,
        }
    }

    /// A CDP session on the browser's page target.
    pub async fn page(&self) -> Cdp {
        let targets: Value = reqwest::get(format!("http://127.0.0.1:{}/json/list", self.port))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let url = targets
            .as_array()
            .unwrap()
            .iter()
            .find(|target| target["type"] == "page")
            .expect("a page target")["webSocketDebuggerUrl"]
            .as_str()
            .unwrap()
            .to_owned();
        let (socket, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        Cdp { socket, next_id: 0 }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // chromium forks renderers and helpers: end the whole group it leads.
        if let Some(pid) = self.child.id() {
            let group = format!("-{pid}");
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &group])
                .status();
            // Reap the leader and wait (bounded) until no process of the group is left, so
            // nothing writes into the profile while it is removed.
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while std::time::Instant::now() < deadline {
                let reaped = !matches!(self.child.try_wait(), Ok(None));
                let group_alive = std::process::Command::new("kill")
                    .args(["-0", "--", &group])
                    .stderr(std::process::Stdio::null())
                    .status()
                    .is_ok_and(|status| status.success());
                if reaped && !group_alive {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

pub struct Cdp {
    socket: tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
    next_id: u64,
}

impl Cdp {
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let request = json!({"id": id, "method": method, "params": params});
        self.socket.send(Message::text(request.to_string())).await.unwrap();
        loop {
            let message = self.socket.next().await.expect("CDP socket open").unwrap();
            if let Message::Text(text) = message {
                let value: Value = serde_json::from_str(&text).unwrap();
                if value["id"] == id {
                    assert!(value.get("error").is_none(), "{method}: {value}");
                    return value["result"].clone();
                }
            }
        }
    }

    /// The value of a JavaScript expression in the page.
    pub async fn eval(&mut self, expression: &str) -> Value {
        let result = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true}),
            )
            .await;
        assert!(result.get("exceptionDetails").is_none(), "{expression}: {result}");
        result["result"]["value"].clone()
    }

    /// Polls `expression` until it is `true`; fails with `what` and the page's log after
    /// [`PATIENCE`].
    pub async fn until(&mut self, expression: &str, what: &str) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            if self.eval(expression).await == Value::Bool(true) {
                return;
            }
            if tokio::time::Instant::now() > deadline {
                let log = self.eval("document.getElementById('log').innerText").await;
                panic!("the page never showed {what}; its log: {log}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn open(&mut self, server: &Server) {
        self.call("Page.navigate", json!({"url": server.url("/")})).await;
        self.until(
            "document.readyState === 'complete' && document.getElementById('agent') !== null \
             && document.getElementById('agent').options.length > 0",
            "the agent list",
        )
        .await;
    }

    pub async fn send(&mut self, text: &str) {
        let script = format!(
            "document.getElementById('input').value = {}; document.getElementById('send').click(); true",
            json!(text)
        );
        assert_eq!(self.eval(&script).await, Value::Bool(true));
    }
}

pub const REPLY_SHOWN: &str =
    "[...document.querySelectorAll('.msg.assistant')].some((e) => e.textContent.includes('turn 1: listed'))";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_streams_a_reply_and_shows_the_tool_call_collapsed() {
    let server = Server::start(ServeOptions::default()).await;
    let browser = Browser::launch().await;
    let mut page = browser.page().await;
    page.open(&server).await;
    page.send("use a tool").await;
    page.until(REPLY_SHOWN, "the streamed reply").await;
    let tool = page
        .eval(
            "(() => { const d = document.querySelector('#log details.tool'); \
             return d && {open: d.open, summary: d.querySelector('summary').textContent, \
             result: (d.querySelector('pre.result') || {}).textContent || null}; })()",
        )
        .await;
    assert_eq!(tool["open"], false, "tool calls are collapsed: {tool}");
    assert_eq!(tool["summary"], "tool: list_files");
    assert!(tool["result"].is_string(), "the tool's result is inside it: {tool}");
    // The session is listed in the sidebar and kept on the server.
    page.until(
        "document.querySelectorAll('#sessions .session').length === 1",
        "the session in the list",
    )
    .await;
    let session = page
        .eval("document.querySelector('#sessions .session').dataset.id")
        .await;
    let history = server.history(session.as_str().unwrap()).await;
    assert_eq!(history.last().unwrap().1, "turn 1: listed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approve_button_resumes_the_turn_and_streams_the_rest() {
    let server = Server::start_with(ServeOptions::default(), Some(ASK_LIST)).await;
    let browser = Browser::launch().await;
    let mut page = browser.page().await;
    page.open(&server).await;
    page.send("use a tool").await;
    page.until(
        "document.querySelector('.approval button.approve') !== null",
        "the approval buttons",
    )
    .await;
    let asked = page.eval("document.querySelector('.approval pre').textContent").await;
    assert!(asked.as_str().unwrap().starts_with("list_files"), "{asked}");
    assert_eq!(
        page.eval("[...document.querySelectorAll('.approval button')].map((b) => b.textContent).join(',')")
            .await,
        "Approve,Deny,Always"
    );
    assert_eq!(
        page.eval("document.querySelector('.approval button.approve').click(); true")
            .await,
        Value::Bool(true)
    );
    page.until(REPLY_SHOWN, "the reply after approval").await;
    // The card says what was decided, its buttons are gone, and the approved call ran inside
    // it: shown once, with its result.
    let card = page
        .eval(
            "(() => { const a = document.querySelector('.approval'); \
             return {approved: a.classList.contains('approved'), verdict: a.querySelector('.verdict').textContent, \
             buttons: a.querySelectorAll('button').length, \
             tools: document.querySelectorAll('#log details.tool').length, \
             inside: a.querySelectorAll('details.tool pre.result').length, \
             asked: a.querySelectorAll('.call > pre').length}; })()",
        )
        .await;
    assert_eq!(card["approved"], true, "{card}");
    assert_eq!(card["verdict"], "Approved by you.", "{card}");
    assert_eq!(card["buttons"], 0, "{card}");
    assert_eq!(card["tools"], 1, "the approved call is shown once: {card}");
    assert_eq!(card["inside"], 1, "its result is in the card: {card}");
    assert_eq!(card["asked"], 0, "the asked-for call became the run call: {card}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deny_button_says_denied_and_the_call_does_not_run() {
    let server = Server::start_with(ServeOptions::default(), Some(ASK_LIST)).await;
    let browser = Browser::launch().await;
    let mut page = browser.page().await;
    page.open(&server).await;
    page.send("use a tool").await;
    page.until(
        "document.querySelector('.approval button.deny') !== null",
        "the approval buttons",
    )
    .await;
    page.eval("document.querySelector('.approval button.deny').click(); true")
        .await;
    page.until(
        "document.querySelector('.approval .verdict') !== null && document.getElementById('stop').disabled",
        "the verdict and the end of the turn",
    )
    .await;
    let card = page
        .eval(
            "(() => { const a = document.querySelector('.approval'); \
             return {denied: a.classList.contains('denied'), verdict: a.querySelector('.verdict').textContent, \
             results: [...document.querySelectorAll('pre.result')].filter((p) => !p.classList.contains('failed')).length}; })()",
        )
        .await;
    assert_eq!(card["denied"], true, "{card}");
    assert_eq!(card["verdict"], "Denied by you.", "{card}");
    assert_eq!(card["results"], 0, "a denied call has no successful result: {card}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subagent_activity_is_shown_indented_under_the_childs_id() {
    let server = Server::start(ServeOptions::default()).await;
    let browser = Browser::launch().await;
    let mut page = browser.page().await;
    page.open(&server).await;
    page.send("delegate:look around").await;
    page.until(
        "[...document.querySelectorAll('.msg.assistant')].some((e) => e.textContent.includes('listed'))",
        "the parent's reply",
    )
    .await;
    let child = page
        .eval(
            "(() => { const c = document.querySelector('#log .child'); \
             return c && {who: c.querySelector('.who').textContent, text: c.innerText, \
             indent: parseInt(c.style.marginLeft, 10)}; })()",
        )
        .await;
    assert_eq!(child["who"], "subagent researcher", "{child}");
    assert!(
        child["text"].as_str().unwrap().contains("turn 1: look around"),
        "{child}"
    );
    assert!(child["indent"].as_i64().unwrap() > 0, "{child}");
}

/// Everything the server logs during the tests (one global subscriber for the binary).
fn server_log() -> &'static std::sync::Mutex<String> {
    static LOG: std::sync::OnceLock<&'static std::sync::Mutex<String>> = std::sync::OnceLock::new();
    LOG.get_or_init(|| {
        let log: &'static std::sync::Mutex<String> = Box::leak(Box::new(std::sync::Mutex::new(String::new())));
        struct Sink(&'static std::sync::Mutex<String>);
        impl std::io::Write for Sink {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().push_str(&String::from_utf8_lossy(buf));
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter("harness_serve=warn")
            .with_ansi(false)
            .with_writer(move || Sink(log))
            .finish();
        let _ = tracing::subscriber::set_global_default(subscriber);
        log
    })
}

/// A page on another origin (another port of 127.0.0.1) that attacks `target`: `no-cors`
/// simple POSTs of a message and of an approval, then a preflighted JSON POST.
const ATTACK_PAGE: &str = r#"<!doctype html><html><body><script>
window.results = null;
(async () => {
  const target = new URLSearchParams(location.search).get("target");
  const session = target + "/api/agents/helper/sessions/victim";
  const out = [];
  const attempt = async (name, url, init) => {
    try { const r = await fetch(url, init); out.push(name + ":" + r.type + ":" + r.status); }
    catch (e) { out.push(name + ":error"); }
  };
  await attempt("no-cors-message", session + "/messages",
    { method: "POST", mode: "no-cors", headers: { "Content-Type": "text/plain" }, body: '{"message": "tool please"}' });
  await attempt("no-cors-approve", session + "/approvals",
    { method: "POST", mode: "no-cors", body: '{"all": "approve"}' });
  await attempt("form-message", session + "/messages",
    { method: "POST", mode: "no-cors", headers: { "Content-Type": "application/x-www-form-urlencoded" }, body: "message=tool" });
  await attempt("preflighted-message", session + "/messages",
    { method: "POST", headers: { "Content-Type": "application/json" }, body: '{"message": "tool please"}' });
  await attempt("preflighted-header", session + "/cancel",
    { method: "POST", headers: { "X-Harness-Request": "1" } });
  window.results = out;
})();
</script></body></html>"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_on_another_origin_cannot_post_to_a_keyless_server() {
    let log = server_log();
    let server = Server::start_with(ServeOptions::default(), Some(ASK_LIST)).await;
    // The attacker's origin: another port on the loopback address.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let attacker = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().route("/", axum::routing::get(|| async { axum::response::Html(ATTACK_PAGE) }));
    tokio::spawn(async move { axum::serve(listener, app).await });

    let browser = Browser::launch().await;
    let mut page = browser.page().await;
    page.call(
        "Page.navigate",
        json!({"url": format!("{attacker}/?target={}", server.base)}),
    )
    .await;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let results = loop {
        let results = page.eval("window.results").await;
        if results.is_array() {
            break results;
        }
        assert!(tokio::time::Instant::now() < deadline, "the attack page never finished");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let results: Vec<&str> = results.as_array().unwrap().iter().filter_map(Value::as_str).collect();
    // The browser sent the simple requests (opaque answers) and gave up on the preflighted ones.
    assert!(results.contains(&"no-cors-message:opaque:0"), "{results:?}");
    assert!(results.contains(&"preflighted-message:error"), "{results:?}");
    assert!(results.contains(&"preflighted-header:error"), "{results:?}");
    // Nothing ran: the session does not exist and nothing waits for approval.
    assert_eq!(server.get("/api/agents/helper/sessions/victim").await.status(), 404);
    let pending: Value = server
        .get("/api/agents/helper/sessions/victim/approvals")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(pending["pending"], json!([]), "{pending}");
    // The log names the refusals and the origin.
    let text = log.lock().unwrap().clone();
    assert!(
        text.contains("refused a cross-origin request") && text.contains(&attacker),
        "log: {text}"
    );
}
