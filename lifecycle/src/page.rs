//! The registration page: a small static HTML form (GET), posting to the same URL, and the
//! pages the register Lambda answers with. Every value written into a page is escaped.

use crate::domain::registration::{FIELDS, TOKEN_FIELD};

/// Security headers sent with every response of the register Lambda.
pub const SECURITY_HEADERS: [(&str, &str); 7] = [
    (
        "content-security-policy",
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    (
        "strict-transport-security",
        "max-age=63072000; includeSubDomains",
    ),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
    ("cache-control", "no-store"),
    ("content-type", "text/html; charset=utf-8"),
];

/// Escape text for HTML content and attribute values.
///
/// ```
/// assert_eq!(awsmp_lifecycle::page::escape("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
/// ```
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:36rem;margin:3rem auto;padding:0 1rem;color:#1b1b1b}\
label{display:block;margin:1rem 0 .25rem}input,textarea{width:100%;padding:.5rem;box-sizing:border-box}\
button{margin-top:1.5rem;padding:.6rem 1.4rem}.note{color:#555}";

fn document(title: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{t}</title><style>{STYLE}</style></head>\
         <body><main><h1 id=\"title\">{t}</h1>{body}</main></body></html>\n",
        t = escape(title)
    )
}

/// The registration form. With a token (AWS Marketplace posted it) the token rides in a
/// hidden field; without one (a seller opening the page) the buyer pastes it.
pub fn form(token: Option<&str>) -> String {
    let token_input = match token {
        Some(t) => format!(
            "<input type=\"hidden\" name=\"{TOKEN_FIELD}\" value=\"{}\">",
            escape(t)
        ),
        None => format!(
            "<label for=\"token\">Registration token</label>\
             <input id=\"token\" name=\"{TOKEN_FIELD}\" required>"
        ),
    };
    let fields: String = FIELDS
        .iter()
        .map(|f| {
            let input = if f.input == "textarea" {
                format!(
                    "<textarea id=\"{n}\" name=\"{n}\" maxlength=\"{m}\" rows=\"4\"></textarea>",
                    n = f.name,
                    m = f.max_len
                )
            } else {
                format!(
                    "<input id=\"{n}\" name=\"{n}\" type=\"{t}\" maxlength=\"{m}\">",
                    n = f.name,
                    t = f.input,
                    m = f.max_len
                )
            };
            format!(
                "<label for=\"{}\">{}</label>{input}",
                f.name,
                escape(f.label)
            )
        })
        .collect();
    document(
        "Complete your registration",
        &format!(
            "<p class=\"note\">Tell us who you are so we can set up your account.</p>\
             <form id=\"registration\" method=\"post\">{token_input}{fields}\
             <button id=\"submit\" type=\"submit\">Register</button></form>"
        ),
    )
}

/// Registration stored.
pub fn registered() -> String {
    document(
        "You are registered",
        "<p id=\"outcome\" data-outcome=\"registered\">Thank you. Your account is set up; \
         you can close this page.</p>",
    )
}

/// A page explaining what went wrong and what to do; `outcome` is a stable marker for tests
/// and monitoring (a reason code).
pub fn problem(title: &str, outcome: &str, what_to_do: &str) -> String {
    document(
        title,
        &format!(
            "<p id=\"outcome\" data-outcome=\"{}\">{}</p>",
            escape(outcome),
            escape(what_to_do)
        ),
    )
}
