//! A Lambda's init: configuration read and resources resolved before the first invocation.
//! A failure is reported to the Lambda Runtime API (`POST /2018-06-01/runtime/init/error`,
//! <https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html#runtimes-api-initerror>)
//! with a named error type before the process exits, so Lambda — or the local host
//! (docs/local-stack.md, "Lambdas as processes") — says why the function could not start
//! instead of only seeing it exit. The `lambda_runtime` crate reports its own SnapStart
//! failures this way, not a failure before `lambda_runtime::run`.

use lambda_runtime_api_client::{Client, body::Body, build_request};

/// The `errorType` of every init failure: the function's configuration (an environment
/// variable missing or malformed, a table or queue not named) does not let it start.
pub const INIT_ERROR_TYPE: &str = "Awsmp.ConfigurationError";

/// Run `init`; on failure report it to the Runtime API (when there is one:
/// `AWS_LAMBDA_RUNTIME_API`), then return it, so `main` exits with it.
pub async fn init<T, E>(
    function: &str,
    init: impl Future<Output = Result<T, E>>,
) -> Result<T, lambda_runtime::Error>
where
    E: Into<lambda_runtime::Error>,
{
    match init.await {
        Ok(v) => Ok(v),
        Err(e) => {
            let e: lambda_runtime::Error = e.into();
            let message = format!("{function}: {}", chain(e.as_ref()));
            report(&message).await;
            Err(message.into())
        }
    }
}

/// An error and its sources, `: `-separated.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// The init error's JSON body, as the Runtime API takes it.
pub fn init_error_body(message: &str) -> String {
    serde_json::json!({ "errorType": INIT_ERROR_TYPE, "errorMessage": message, "stackTrace": [] })
        .to_string()
}

async fn report(message: &str) {
    if std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_none() {
        return;
    }
    let sent = async {
        let client = Client::builder().build()?;
        let req = build_request()
            .method("POST")
            .uri("/2018-06-01/runtime/init/error")
            .header("lambda-runtime-function-error-type", INIT_ERROR_TYPE)
            .header("content-type", "application/json")
            .body(Body::from(init_error_body(message)))?;
        client.call(req).await?;
        Ok::<(), lambda_runtime::Error>(())
    };
    if let Err(e) = sent.await {
        eprintln!("reporting the init error to the Runtime API failed: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_names_the_error() {
        let v: serde_json::Value =
            serde_json::from_str(&init_error_body("aggregator: AWSMP_X is not set")).unwrap();
        assert_eq!(v["errorType"], INIT_ERROR_TYPE);
        assert_eq!(v["errorMessage"], "aggregator: AWSMP_X is not set");
    }

    #[tokio::test]
    async fn without_a_runtime_api_the_error_is_returned_with_the_function_named() {
        // No AWS_LAMBDA_RUNTIME_API in a test process: nothing to report to.
        let err = init("aggregator", async { Err::<(), _>("AWSMP_X is not set") })
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "aggregator: AWSMP_X is not set");
    }
}
