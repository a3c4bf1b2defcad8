//! The JSON-RPC connection to a server: the async-lsp main loop over its
//! stdio, what the client answers the server's own requests and where its
//! notifications go, and requests with a timeout that sends
//! `$/cancelRequest`.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_lsp::router::Router;
use async_lsp::{ErrorCode, MainLoop, ServerSocket};
use lsp_seam::LspError;
use lsp_types::notification::{Cancel, Notification};
use lsp_types::request::{
    RegisterCapability, Request, UnregisterCapability, WorkDoneProgressCreate,
    WorkspaceConfiguration,
};
use lsp_types::{CancelParams, NumberOrString, ProgressParams};
use serde_json::Value;
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

use super::{Failure, Server, Shared, lock};

/// Runs the client's main loop over the server's `stdout` and `stdin` on a
/// task of its own, which marks the server dead when the connection ends;
/// returns the socket to send through.
pub(super) fn connect(
    shared: Arc<Shared>,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::process::ChildStdout,
) -> ServerSocket {
    let (mainloop, socket) = MainLoop::new_client(|_server| {
        let mut router = Router::new(shared.clone());
        router
            .request::<WorkDoneProgressCreate, _>(|_, _| async { Ok(()) })
            .request::<RegisterCapability, _>(|_, _| async { Ok(()) })
            .request::<UnregisterCapability, _>(|_, _| async { Ok(()) })
            .request::<WorkspaceConfiguration, _>(|st, params| {
                let values = st.configuration(&params.items);
                async move { Ok(values) }
            })
            .unhandled_request(|_, req| {
                let refresh = req.method.ends_with("/refresh");
                async move {
                    if refresh {
                        Ok(Value::Null)
                    } else {
                        Err(async_lsp::ResponseError::new(
                            ErrorCode::METHOD_NOT_FOUND,
                            format!("client does not handle {}", req.method),
                        ))
                    }
                }
            })
            .unhandled_notification(|st, notif| {
                match notif.method.as_str() {
                    "experimental/serverStatus" => st.on_server_status(&notif.params),
                    "window/logMessage" => st.on_log_message(&notif.params),
                    "textDocument/publishDiagnostics" => st.on_diagnostics(&notif.params),
                    lsp_types::notification::Progress::METHOD => {
                        if let Ok(p) = serde_json::from_value::<ProgressParams>(notif.params) {
                            st.on_progress(p);
                        }
                    }
                    _ => {}
                }
                ControlFlow::Continue(())
            })
            .unhandled_event(|_, _| ControlFlow::Continue(()));
        router
    });

    // The main loop panics when every socket is gone while it runs; it
    // ends instead when the server's stdout closes (the session is
    // ended on drop).
    let keep_socket = socket.clone();
    tokio::spawn(async move {
        let _keep_socket = keep_socket;
        let how = match mainloop
            .run_buffered(stdout.compat(), stdin.compat_write())
            .await
        {
            Ok(()) => "the connection closed".to_owned(),
            Err(e) => format!("the connection failed: {e}"),
        };
        shared.mark_dead(how);
    });
    socket
}

impl Shared {
    /// The answer to `workspace/configuration`: each item's section of the
    /// server's configured settings (`null` where there is none).
    fn configuration(&self, items: &[lsp_types::ConfigurationItem]) -> Vec<Value> {
        items
            .iter()
            .map(|item| {
                let Some(settings) = &self.settings else {
                    return Value::Null;
                };
                match &item.section {
                    None => settings.clone(),
                    Some(section) => section
                        .split('.')
                        .try_fold(settings, |v, key| v.get(key))
                        .cloned()
                        .unwrap_or(Value::Null),
                }
            })
            .collect()
    }
}

impl Server {
    /// Sends a request, with a timeout that also sends `$/cancelRequest`.
    pub async fn request<R: Request>(
        &self,
        params: R::Params,
        timeout: Duration,
    ) -> Result<R::Result, Failure> {
        // async-lsp numbers outgoing requests 0, 1, 2, ... in the order they
        // reach its main loop; sending under this lock keeps our count equal
        // to the id it assigns, which `$/cancelRequest` needs.
        let (id, mut fut, early) = {
            let mut next = lock(&self.next_id);
            let id = *next;
            *next += 1;
            let mut fut = Box::pin(self.socket.request::<R>(params));
            let waker = futures::task::noop_waker();
            let early = match fut.as_mut().poll(&mut Context::from_waker(&waker)) {
                Poll::Ready(r) => Some(r),
                Poll::Pending => None,
            };
            (id, fut, early)
        };
        let outcome = match early {
            Some(r) => r,
            None => match tokio::time::timeout(timeout, &mut fut).await {
                Ok(r) => r,
                Err(_) => {
                    let _ = self.socket.notify::<Cancel>(CancelParams {
                        id: NumberOrString::Number(id),
                    });
                    return Err(Failure::Lsp(LspError::Timeout {
                        op: lsp_seam::Op::Definition,
                        timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                    }));
                }
            },
        };
        match outcome {
            Ok(v) => Ok(v),
            Err(async_lsp::Error::Response(e)) if e.code == ErrorCode::CONTENT_MODIFIED => {
                Err(Failure::ContentModified)
            }
            Err(async_lsp::Error::Response(e)) => Err(Failure::Lsp(LspError::ServerError {
                code: Some(i64::from(e.code.0)),
                message: e.message,
            })),
            Err(async_lsp::Error::Deserialize(e)) => Err(Failure::Lsp(LspError::ServerError {
                code: None,
                message: format!("undecodable answer to {}: {e}", R::METHOD),
            })),
            Err(_) => Err(Failure::Dead),
        }
    }

    /// Sends a notification.
    pub(super) fn notify<N: Notification>(&self, params: N::Params) -> Result<(), Failure> {
        self.socket.notify::<N>(params).map_err(|_| Failure::Dead)
    }
}
