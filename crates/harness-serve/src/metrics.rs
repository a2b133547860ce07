//! `GET /metrics`: Prometheus text format, under the API's authentication (a valid key when
//! keys are configured; a keyless server is loopback-only). The turn, model-call, token and
//! tool series come from the kernel's spans ([`harness_ops::metrics`]); the server adds its
//! gauges: turns running, queue depth, agents, `harness_approvals_pending{kind="session"}`
//! (calls waiting for a person in sessions whose last turn here asked), and
//! `harness_sandboxes_active` (sandboxes bound to a running call of this process), then
//! those of [`Gateway::add_gauges`] (`harness serve`: background tasks by state and the
//! tasks' pending approvals, from the task records). No series is labelled with a user or
//! session id.

use crate::Gateway;
use crate::error::ApiError;
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use harness_ops::metrics::{Gauge, Metrics};

pub(crate) async fn metrics(State(gateway): State<Gateway>, headers: HeaderMap) -> Result<Response, ApiError> {
    gateway.user(&headers)?;
    let (running, waiting) = gateway.inner.queues.depth();
    #[allow(clippy::cast_precision_loss)] // counts far below 2^52
    let gauges = [
        Gauge {
            name: "harness_turns_running",
            help: "Turns running now.",
            samples: vec![(Vec::new(), running as f64)],
        },
        Gauge {
            name: "harness_queue_depth",
            help: "Messages waiting behind a running turn of their session.",
            samples: vec![(Vec::new(), waiting as f64)],
        },
        Gauge {
            name: "harness_agents",
            help: "Agents served.",
            samples: vec![(Vec::new(), gateway.inner.agents.len() as f64)],
        },
    ];
    let mut gauges = gauges.to_vec();
    #[allow(clippy::cast_precision_loss)] // counts far below 2^52
    gauges.extend([
        Gauge {
            name: "harness_approvals_pending",
            help: "Tool calls waiting for a person: of sessions whose last turn this server ran (kind=session), of background tasks (kind=task).",
            samples: vec![(
                vec![("kind", "session".to_owned())],
                gateway.inner.queues.pending_approvals() as f64,
            )],
        },
        Gauge {
            name: "harness_sandboxes_active",
            help: "Sandboxes bound to a running call of this process.",
            samples: vec![(Vec::new(), harness::sandbox::bound_sandboxes() as f64)],
        },
    ]);
    if let Some(source) = gateway.inner.gauges.get() {
        gauges.extend(source.gauges().await);
    }
    let body = Metrics::global().render(&gauges);
    Ok((
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        body,
    )
        .into_response())
}
