//! The register Lambda (behind API Gateway): `GET` serves the registration page; `POST` reads
//! the `x-amzn-marketplace-token` form, resolves it, checks the product and stores the
//! registration (docs/lifecycle.md, "Registration"). HTTP-framework-free: the Lambda binary
//! and the local stack's server both translate to and from [`RegisterRequest`] and [`Page`].

use awsmp_aws::emf::{Metric, MetricsSink};
use awsmp_contract::{metrics, reasons};
use chrono::{DateTime, Utc};

use crate::domain::registration::{Form, FormError, ResolvedCustomer, mask, parse_form};
use crate::page;
use crate::ports::{CustomerProfileStore, CustomerResolver, ResolveError, SubscriberStore};

/// The only content type the form posts.
pub const FORM_CONTENT_TYPE: &str = "application/x-www-form-urlencoded";

/// What the register Lambda needs.
pub struct RegisterService<'a> {
    /// `ResolveCustomer`.
    pub resolver: &'a dyn CustomerResolver,
    /// The in-region customer-profile table.
    pub profiles: &'a dyn CustomerProfileStore,
    /// The subscribers table (PII-free upsert).
    pub subscribers: &'a dyn SubscriberStore,
    /// This stack's product (`AWSMP_PRODUCT_CODE`).
    pub product_code: &'a str,
    /// The region the Lambda runs in (added to `registeredRegions`).
    pub region: &'a str,
    /// EMF metrics.
    pub metrics: &'a MetricsSink,
}

/// An HTTP request, as far as the register Lambda reads it.
#[derive(Debug, Clone, Copy)]
pub struct RegisterRequest<'a> {
    /// `GET`, `POST`, …
    pub method: &'a str,
    /// The `Content-Type` header.
    pub content_type: Option<&'a str>,
    /// The body (already base64-decoded).
    pub body: &'a [u8],
}

/// The response: a status and an HTML page; send [`page::SECURITY_HEADERS`] with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// HTTP status.
    pub status: u16,
    /// The HTML.
    pub html: String,
    /// Extra headers (e.g. `allow` on a 405).
    pub headers: Vec<(&'static str, &'static str)>,
}

impl Page {
    fn ok(html: String) -> Self {
        Self {
            status: 200,
            html,
            headers: Vec::new(),
        }
    }

    /// Every header to send: the security headers, then the extras.
    pub fn all_headers(&self) -> Vec<(&'static str, &'static str)> {
        page::SECURITY_HEADERS
            .iter()
            .copied()
            .chain(self.headers.iter().copied())
            .collect()
    }
}

fn problem(
    svc: &RegisterService<'_>,
    status: u16,
    reason: &'static str,
    title: &str,
    what: &str,
) -> Page {
    svc.metrics
        .emit(Metric::count(metrics::REGISTRATION_FAILED).with(metrics::REASON, reason));
    tracing::warn!(reason, status, "registration refused");
    Page {
        status,
        html: page::problem(title, reason, what),
        headers: Vec::new(),
    }
}

const START_AGAIN: &str = "Return to AWS Marketplace, open your subscription to this product and choose \
     \u{201c}Set up your account\u{201d} again for a fresh link. You do not need to subscribe again.";

fn form_problem(svc: &RegisterService<'_>, e: &FormError) -> Page {
    match e.reason {
        reasons::MISSING_TOKEN => problem(
            svc,
            400,
            e.reason,
            "Registration link incomplete",
            &format!("This page needs the registration token AWS Marketplace sends. {START_AGAIN}"),
        ),
        reasons::INVALID_TOKEN => problem(
            svc,
            400,
            e.reason,
            "This registration link is not valid",
            START_AGAIN,
        ),
        reasons::BODY_TOO_LARGE => problem(
            svc,
            413,
            e.reason,
            "The form is too large",
            "Shorten your answers and submit the form again.",
        ),
        _ => problem(
            svc,
            400,
            e.reason,
            "Please check the form",
            &format!("{}. Correct it and submit the form again.", e.message),
        ),
    }
}

async fn resolve(svc: &RegisterService<'_>, token: &str) -> Result<ResolvedCustomer, Page> {
    match svc.resolver.resolve(token).await {
        Ok(c) if c.product_code == svc.product_code => Ok(c),
        Ok(c) => {
            tracing::warn!(resolved_product = %c.product_code, "token of another product");
            Err(problem(
                svc,
                400,
                reasons::PRODUCT_MISMATCH,
                "This link is for another product",
                "Open the registration link from this product's page in AWS Marketplace.",
            ))
        }
        Err(ResolveError::Expired) => Err(problem(
            svc,
            400,
            reasons::EXPIRED_TOKEN,
            "This registration link has expired",
            &format!("Registration links are valid for a few hours. {START_AGAIN}"),
        )),
        Err(ResolveError::Invalid) => Err(problem(
            svc,
            400,
            reasons::INVALID_TOKEN,
            "This registration link is not valid",
            START_AGAIN,
        )),
        Err(ResolveError::Failed(e)) => {
            tracing::error!(error = %e, "ResolveCustomer failed");
            Err(problem(
                svc,
                503,
                reasons::RESOLVE_CUSTOMER_FAILED,
                "We could not check your registration link",
                "Please try again in a minute with the same link; it stays valid for a few hours.",
            ))
        }
    }
}

async fn store(
    svc: &RegisterService<'_>,
    form: &Form,
    customer: &ResolvedCustomer,
    now: DateTime<Utc>,
) -> Result<(), crate::error::LifecycleError> {
    if !form.registration.fields.is_empty() {
        svc.profiles
            .put(customer, &form.registration, svc.region, now)
            .await?;
    }
    svc.subscribers
        .record_registration(&customer.key, &customer.product_code, svc.region, now)
        .await
}

async fn post(svc: &RegisterService<'_>, req: RegisterRequest<'_>, now: DateTime<Utc>) -> Page {
    let media_type = req
        .content_type
        .and_then(|c| c.split(';').next())
        .map(|c| c.trim().to_ascii_lowercase());
    if media_type.as_deref() != Some(FORM_CONTENT_TYPE) {
        return problem(
            svc,
            415,
            reasons::MALFORMED_FORM,
            "Unsupported form",
            "Submit the registration form from its page.",
        );
    }
    let form = match parse_form(req.body) {
        Ok(f) => f,
        Err(e) => return form_problem(svc, &e),
    };
    let customer = match resolve(svc, &form.token).await {
        Ok(c) => c,
        Err(page) => return page,
    };
    if let Err(e) = store(svc, &form, &customer, now).await {
        tracing::error!(error = %e, license = %mask(&customer.key.license_arn), "registration not stored");
        return problem(
            svc,
            500,
            reasons::REGISTRATION_NOT_STORED,
            "We could not save your registration",
            "Please try again in a minute with the same link; it stays valid for a few hours.",
        );
    }
    tracing::info!(license = %mask(&customer.key.license_arn), account = %mask(&customer.key.customer_aws_account_id), fields = ?form.registration.fields.keys().collect::<Vec<_>>(), "buyer registered");
    if form.registration.fields.is_empty() {
        // AWS Marketplace's redirect carries only the token: ask for the details.
        return Page::ok(page::form(Some(&form.token)));
    }
    svc.metrics
        .emit(Metric::count(metrics::REGISTRATION_SUCCEEDED));
    Page::ok(page::registered())
}

/// Answer one request at `now`.
pub async fn respond(
    svc: &RegisterService<'_>,
    req: RegisterRequest<'_>,
    now: DateTime<Utc>,
) -> Page {
    match req.method {
        "GET" => Page::ok(page::form(None)),
        "POST" => post(svc, req, now).await,
        _ => Page {
            status: 405,
            html: page::problem(
                "Method not allowed",
                "MethodNotAllowed",
                "Open the registration page from AWS Marketplace.",
            ),
            headers: vec![("allow", "GET, POST")],
        },
    }
}

/// The Lambda entry: API Gateway's request (through `lambda_http`) → [`respond`] → its
/// response, with the security headers.
pub async fn lambda(
    svc: &RegisterService<'_>,
    req: lambda_http::Request,
) -> Result<lambda_http::Response<lambda_http::Body>, lambda_http::Error> {
    let content_type = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok());
    let request = RegisterRequest {
        method: req.method().as_str(),
        content_type,
        body: req.body().as_ref(),
    };
    let page = respond(svc, request, Utc::now()).await;
    let mut resp = lambda_http::Response::builder().status(page.status);
    for (k, v) in page.all_headers() {
        resp = resp.header(k, v);
    }
    Ok(resp.body(lambda_http::Body::Text(page.html))?)
}
