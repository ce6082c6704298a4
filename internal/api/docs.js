// Coinpulse documentation page: fetches the OpenAPI document and renders it.
// Served at /docs/docs.js under a strict CSP: no inline scripts, no inline
// event handlers, no external resources. The DOM is built with
// createElement/textContent only, never innerHTML.
(function () {
  "use strict";

  var SPEC_URL = "/api/v1/openapi.json";
  var METHODS = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];
  var spec = null;

  // ---------------------------------------------------------------- DOM helpers

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        var v = attrs[k];
        if (v === null || v === undefined || v === false) return;
        if (k === "class") node.className = v;
        else if (k === "text") node.textContent = v;
        else node.setAttribute(k, v === true ? "" : String(v));
      });
    }
    append(node, children);
    return node;
  }

  function append(node, children) {
    if (children === null || children === undefined) return node;
    if (!Array.isArray(children)) children = [children];
    children.forEach(function (c) {
      if (c === null || c === undefined || c === false) return;
      node.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    });
    return node;
  }

  function slug(s) {
    return String(s).toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "");
  }

  function safeHref(url) {
    // Only same-site paths, fragments and http(s) links.
    if (/^(https?:\/\/|\/(?!\/)|#)/i.test(url)) return url;
    return null;
  }

  // ---------------------------------------------------------------- Markdown (CommonMark subset)

  // Inline: `code`, **bold**, *em*, [text](url).
  function inline(text) {
    var out = [];
    var re = /`([^`]+)`|\*\*([^*]+)\*\*|\[([^\]]+)\]\(([^)\s]+)\)|\*([^*\s][^*]*)\*/g;
    var last = 0, m;
    while ((m = re.exec(text)) !== null) {
      if (m.index > last) out.push(text.slice(last, m.index));
      if (m[1] !== undefined) out.push(el("code", { text: m[1] }));
      else if (m[2] !== undefined) out.push(el("strong", null, inline(m[2])));
      else if (m[3] !== undefined) {
        var href = safeHref(m[4]);
        out.push(href ? el("a", { href: href }, inline(m[3])) : m[3]);
      } else if (m[5] !== undefined) out.push(el("em", null, inline(m[5])));
      last = re.lastIndex;
    }
    if (last < text.length) out.push(text.slice(last));
    return out;
  }

  function splitRow(line) {
    var s = line.trim();
    if (s.charAt(0) === "|") s = s.slice(1);
    if (s.charAt(s.length - 1) === "|") s = s.slice(0, -1);
    // Split on pipes outside backticks.
    var cells = [], cur = "", inCode = false;
    for (var i = 0; i < s.length; i++) {
      var ch = s.charAt(i);
      if (ch === "`") inCode = !inCode;
      if (ch === "|" && !inCode) { cells.push(cur.trim()); cur = ""; continue; }
      cur += ch;
    }
    cells.push(cur.trim());
    return cells;
  }

  // Block: headings, bullet lists, pipe tables, paragraphs. headingBase is
  // the HTML level that a Markdown "#" maps to.
  function markdown(src, headingBase) {
    var frag = document.createDocumentFragment();
    if (!src) return frag;
    var lines = String(src).replace(/\r\n?/g, "\n").split("\n");
    var i = 0;
    while (i < lines.length) {
      var line = lines[i];
      if (/^\s*$/.test(line)) { i++; continue; }
      var h = /^(#{1,6})\s+(.*)$/.exec(line);
      if (h) {
        var level = Math.min(6, (headingBase || 3) + h[1].length - 1);
        frag.appendChild(el("h" + level, { id: "doc-" + slug(h[2]) }, inline(h[2])));
        i++;
        continue;
      }
      if (/^\s*\|/.test(line) && i + 1 < lines.length && /^\s*\|?\s*:?-{3,}/.test(lines[i + 1])) {
        var head = splitRow(line);
        i += 2;
        var rows = [];
        while (i < lines.length && /^\s*\|/.test(lines[i])) { rows.push(splitRow(lines[i])); i++; }
        frag.appendChild(dataTable(head.map(function (c) { return c.replace(/`/g, ""); }), rows.map(function (r) {
          return r.map(function (c) { return el("td", null, inline(c)); });
        })));
        continue;
      }
      if (/^\s*[-*]\s+/.test(line)) {
        var ul = el("ul");
        while (i < lines.length && /^\s*[-*]\s+/.test(lines[i])) {
          var item = lines[i].replace(/^\s*[-*]\s+/, "");
          i++;
          while (i < lines.length && /^\s{2,}\S/.test(lines[i]) && !/^\s*[-*]\s+/.test(lines[i])) {
            item += " " + lines[i].trim();
            i++;
          }
          ul.appendChild(el("li", null, inline(item)));
        }
        frag.appendChild(ul);
        continue;
      }
      var para = [line.trim()];
      i++;
      while (i < lines.length && !/^\s*$/.test(lines[i]) && !/^(#{1,6}\s|\s*[-*]\s+|\s*\|)/.test(lines[i])) {
        para.push(lines[i].trim());
        i++;
      }
      frag.appendChild(el("p", null, inline(para.join(" "))));
    }
    return frag;
  }

  // ---------------------------------------------------------------- spec helpers

  function resolve(obj, depth) {
    depth = depth || 0;
    if (!obj || typeof obj !== "object" || typeof obj.$ref !== "string" || depth > 20) return obj;
    var ref = obj.$ref;
    if (ref.indexOf("#/") !== 0) return obj;
    var target = spec;
    ref.slice(2).split("/").forEach(function (part) {
      part = part.replace(/~1/g, "/").replace(/~0/g, "~");
      target = target ? target[part] : undefined;
    });
    if (target === undefined) return obj;
    // Sibling fields of a $ref (description, summary) override the target's.
    var merged = {};
    Object.keys(target).forEach(function (k) { merged[k] = target[k]; });
    Object.keys(obj).forEach(function (k) { if (k !== "$ref") merged[k] = obj[k]; });
    return resolve(merged, depth + 1);
  }

  function refName(obj) {
    if (obj && typeof obj.$ref === "string") {
      var parts = obj.$ref.split("/");
      return parts[parts.length - 1];
    }
    return null;
  }

  function typeOf(schema) {
    if (!schema) return "";
    var name = refName(schema);
    if (name) return name;
    if (schema.allOf) return schema.allOf.map(typeOf).filter(Boolean).join(" & ");
    if (schema.oneOf) return schema.oneOf.map(typeOf).join(" | ");
    if (schema.anyOf) return schema.anyOf.map(typeOf).join(" | ");
    if (schema.const !== undefined) return JSON.stringify(schema.const);
    var t = schema.type;
    var types = Array.isArray(t) ? t.slice() : (t ? [t] : []);
    types = types.map(function (x) {
      if (x === "array") return typeOf(schema.items || {}) + "[]";
      if (x === "object" && schema.properties && schema.properties.data && schema.properties.success) {
        return "{success, data: " + typeOf(schema.properties.data) + ", meta: " + typeOf(schema.properties.meta) + "}";
      }
      return x;
    });
    var out = types.join(" | ");
    if (schema.format) out += " (" + schema.format + ")";
    return out;
  }

  function range(schema) {
    var parts = [];
    if (schema.minimum !== undefined && schema.maximum !== undefined) parts.push(schema.minimum + "–" + schema.maximum);
    else if (schema.minimum !== undefined) parts.push("≥ " + schema.minimum);
    else if (schema.maximum !== undefined) parts.push("≤ " + schema.maximum);
    if (schema.minLength !== undefined || schema.maxLength !== undefined) {
      parts.push((schema.minLength !== undefined ? schema.minLength : 0) + "–" +
        (schema.maxLength !== undefined ? schema.maxLength : "∞") + " chars");
    }
    return parts.join(", ");
  }

  function operations() {
    var ops = [];
    Object.keys(spec.paths || {}).forEach(function (path) {
      var item = resolve(spec.paths[path]);
      METHODS.forEach(function (method) {
        if (!item[method]) return;
        var op = item[method];
        var params = (item.parameters || []).concat(op.parameters || []).map(function (p) { return resolve(p); });
        ops.push({
          path: path, method: method, op: op, params: params,
          servers: op.servers || item.servers || spec.servers || [{ url: "/" }],
          security: op.security !== undefined ? op.security : (spec.security || []),
          id: op.operationId || slug(method + " " + path)
        });
      });
    });
    return ops;
  }

  function joinURL(base, path) {
    return base.replace(/\/+$/, "") + path;
  }

  function origin() {
    var o = window.location && window.location.origin;
    return o && o !== "null" ? o : "http://HOST";
  }

  function exampleValue(p) {
    if (p.example !== undefined) return String(p.example);
    if (p.examples) {
      var first = Object.keys(p.examples)[0];
      if (first) { var ex = resolve(p.examples[first]); if (ex && ex.value !== undefined) return String(ex.value); }
    }
    var s = resolve(p.schema) || {};
    if (s.default !== undefined) return String(s.default);
    if (s.enum && s.enum.length) return String(s.enum[0]);
    return p.name;
  }

  function curlFor(o) {
    var path = o.path.replace(/\{([^}]+)\}/g, function (_, name) {
      var p = o.params.filter(function (x) { return x.in === "path" && x.name === name; })[0];
      return encodeURIComponent(p ? exampleValue(p) : name);
    });
    var query = o.params.filter(function (p) { return p.in === "query" && p.required; }).map(function (p) {
      return encodeURIComponent(p.name) + "=" + encodeURIComponent(exampleValue(p));
    });
    var url = origin() + joinURL(o.servers[0].url, path) + (query.length ? "?" + query.join("&") : "");
    if (/[?&*\[\]]/.test(url)) url = "\"" + url + "\"";
    var parts = ["curl"];
    if (o.method !== "get") parts.push("-X " + o.method.toUpperCase());
    if (o.security.length) parts.push("-H \"Authorization: Bearer $COINPULSE_KEY\"");
    var m = requestMedia(o.op);
    var body = m ? firstExample(m.media) : undefined;
    if (body !== undefined) {
      parts.push("-H \"Content-Type: " + m.type + "\"");
      parts.push("-d '" + JSON.stringify(body).replace(/'/g, "'\\''") + "'");
    }
    parts.push(url);
    return parts.join(" ");
  }

  // ---------------------------------------------------------------- rendering

  // dataTable builds a table that stacks into labelled cards on narrow
  // screens (see the .stack rules in docs.html). rows are arrays of <td>.
  function dataTable(headers, rows) {
    rows.forEach(function (cells) {
      cells.forEach(function (td, i) {
        td.setAttribute("data-label", headers[i]);
        if (td.textContent === "—") td.classList.add("empty");
      });
    });
    return el("div", { class: "scroll" }, el("table", { class: "stack" }, [
      el("thead", null, el("tr", null, headers.map(function (h) { return el("th", { text: h }); }))),
      el("tbody", null, rows.map(function (cells) { return el("tr", null, cells); }))
    ]));
  }

  function codeBlock(text, lang) {
    return el("pre", null, el("code", { class: lang ? "language-" + lang : null, text: text }));
  }

  function jsonBlock(value) {
    return codeBlock(typeof value === "string" ? value : JSON.stringify(value, null, 2), "json");
  }

  function copyButton(text) {
    var btn = el("button", { type: "button", class: "copy", text: "Copy", "aria-label": "Copy the command" });
    btn.addEventListener("click", function () {
      var done = function () {
        btn.textContent = "Copied";
        setTimeout(function () { btn.textContent = "Copy"; }, 1500);
      };
      if (navigator.clipboard && navigator.clipboard.writeText) {
        navigator.clipboard.writeText(text).then(done, function () { selectText(btn.previousSibling); });
      } else {
        selectText(btn.previousSibling);
      }
    });
    return btn;
  }

  function selectText(node) {
    if (!node || !window.getSelection) return;
    var range = document.createRange();
    range.selectNodeContents(node);
    var sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
  }

  function renderParams(params) {
    if (!params.length) return el("p", { class: "muted", text: "No parameters." });
    var rows = params.map(function (p) {
      var s = resolve(p.schema) || {};
      var enumText = s.enum ? s.enum.map(String).join(", ") : "";
      var r = range(s);
      return [
        el("td", { class: "nowrap" }, [el("code", { text: p.name }), p.required ? el("span", { class: "req", text: "required" }) : null]),
        el("td", { class: "nowrap", text: p.in }),
        el("td", { class: "nowrap" }, [typeOf(s), r ? el("span", { class: "muted range", text: r }) : null]),
        el("td", { class: "nowrap" }, s.default !== undefined ? el("code", { text: String(s.default) }) : "—"),
        el("td", null, enumText ? el("code", { text: enumText }) : "—"),
        el("td", null, markdown(p.description || "", 5))
      ];
    });
    return dataTable(["Name", "In", "Type", "Default", "Enum", "Description"], rows);
  }

  function responseExamples(media) {
    var out = [];
    if (media.example !== undefined) out.push({ title: null, value: media.example });
    if (media.examples) {
      Object.keys(media.examples).forEach(function (k) {
        var ex = resolve(media.examples[k]);
        if (ex && ex.value !== undefined) out.push({ title: ex.summary || k, value: ex.value });
      });
    }
    return out;
  }

  function renderResponses(responses) {
    var box = el("div");
    Object.keys(responses || {}).sort().forEach(function (code) {
      var raw = responses[code];
      var r = resolve(raw) || {};
      var cls = "code s" + String(code).charAt(0);
      var head = el("p", null, [el("span", { class: cls, text: code }), " "]);
      append(head, inline((r.description || "").split("\n")[0]));
      var block = el("div", { class: "resp" }, head);
      var content = r.content || {};
      var types = Object.keys(content);
      if (types.length) {
        var media = content[types[0]];
        var schemaText = typeOf(media.schema);
        append(block, el("p", { class: "muted" }, [
          el("code", { text: types.join(", ") }),
          schemaText ? " — " + schemaText : null
        ]));
        var examples = responseExamples(media);
        var success = code.charAt(0) === "2";
        examples.forEach(function (ex, idx) {
          var label = "Example" + (ex.title ? ": " + ex.title : "");
          if (success && idx === 0) {
            append(block, [el("p", { class: "muted", text: label }), jsonBlock(ex.value)]);
          } else {
            append(block, el("details", null, [el("summary", { text: label }), jsonBlock(ex.value)]));
          }
        });
      }
      if (r.headers) {
        var names = Object.keys(r.headers);
        if (names.length) {
          append(block, el("p", { class: "muted" }, ["Headers: "].concat(names.map(function (n, i) {
            return [i ? ", " : "", el("code", { text: n })];
          }).reduce(function (a, b) { return a.concat(b); }, []))));
        }
      }
      box.appendChild(block);
    });
    return box;
  }

  function firstExample(media) {
    var ex = responseExamples(media || {})[0];
    return ex ? ex.value : undefined;
  }

  function requestMedia(op) {
    var rb = resolve(op.requestBody) || {};
    var content = rb.content || {};
    var types = Object.keys(content);
    return types.length ? { body: rb, type: types[0], types: types, media: content[types[0]] } : null;
  }

  function renderRequestBody(op) {
    var m = requestMedia(op);
    if (!m) return null;
    var schemaText = typeOf(m.media.schema);
    var box = el("div", { class: "resp" }, el("p", { class: "muted" }, [
      el("code", { text: m.types.join(", ") }),
      schemaText ? " — " + schemaText : null,
      m.body.required ? el("span", { class: "req", text: "required" }) : null
    ]));
    if (m.body.description) append(box, markdown(m.body.description, 5));
    responseExamples(m.media).forEach(function (ex, idx) {
      var label = "Example" + (ex.title ? ": " + ex.title : "");
      if (idx === 0) append(box, [el("p", { class: "muted", text: label }), jsonBlock(ex.value)]);
      else append(box, el("details", null, [el("summary", { text: label }), jsonBlock(ex.value)]));
    });
    return el("div", null, [el("h4", { text: "Request body" }), box]);
  }

  function renderOperation(o) {
    var op = o.op;
    var tier = op["x-coinpulse-tier"];
    var badges = el("div", { class: "badges" });
    if (!o.security.length) badges.appendChild(el("span", { class: "badge open", text: "no key needed" }));
    else {
      if (tier) badges.appendChild(el("span", { class: "badge" + (tier === "free" ? "" : " paid"), text: tier === "free" ? "all tiers, free included" : tier + " tier and up" }));
      if (op["x-coinpulse-permission"]) badges.appendChild(el("span", { class: "badge", text: "permission: " + op["x-coinpulse-permission"] }));
    }
    var bases = o.servers.map(function (s) { return joinURL(s.url, o.path); });
    badges.appendChild(el("span", { class: "badge mono", text: bases.join("  ·  ") }));

    var curl = curlFor(o);
    return el("section", { class: "op", id: o.id }, [
      el("h3", null, [
        el("span", { class: "method " + o.method, text: o.method.toUpperCase() }),
        el("a", { class: "path", href: "#" + o.id, text: o.path })
      ]),
      op.summary ? el("p", { class: "summary", text: op.summary }) : null,
      badges,
      markdown(op.description || "", 5),
      el("h4", { text: "Parameters" }),
      renderParams(o.params),
      renderRequestBody(op),
      el("h4", { text: "Responses" }),
      renderResponses(op.responses),
      el("h4", { text: "Example request" }),
      el("div", { class: "curl" }, [codeBlock(curl, "sh"), copyButton(curl)])
    ]);
  }

  function renderAuth() {
    var schemes = (spec.components && spec.components.securitySchemes) || {};
    var names = Object.keys(schemes);
    if (!names.length) return null;
    var rows = names.map(function (n) {
      var s = resolve(schemes[n]);
      var how = s.type === "http" ? "Authorization: " + (s.scheme === "bearer" ? "Bearer <key>" : s.scheme)
        : s.type === "apiKey" ? s.name + ": <key> (" + s.in + ")" : s.type;
      return [
        el("td", null, el("code", { text: n })),
        el("td", null, el("code", { text: how })),
        el("td", { text: s.bearerFormat || "—" }),
        el("td", null, markdown(s.description || "", 5))
      ];
    });
    return el("section", { id: "authentication" }, [
      el("h2", { text: "Authentication schemes" }),
      el("p", { text: "Any one of these schemes authenticates a request; operations marked “no key needed” take none." }),
      dataTable(["Scheme", "Header", "Format", "Description"], rows),
      el("p", null, ["Example: ", el("code", { text: "curl -H \"Authorization: Bearer $COINPULSE_KEY\" " + origin() + "/api/v1/markets" })])
    ]);
  }

  function renderSchema(name, schema) {
    var section = el("section", { id: "schema-" + slug(name) }, el("h3", null, el("code", { text: name })));
    if (schema.description) section.appendChild(markdown(schema.description, 5));
    var parts = schema.allOf ? schema.allOf : [schema];
    parts.forEach(function (part) {
      var ref = refName(part);
      if (ref) {
        section.appendChild(el("p", null, ["Every field of ", el("a", { href: "#schema-" + slug(ref) }, el("code", { text: ref })), ", plus:"]));
        return;
      }
      var props = part.properties || {};
      var required = part.required || [];
      var keys = Object.keys(props);
      if (!keys.length) {
        if (required.length) {
          section.appendChild(el("p", null, ["Always present here: "].concat(required.map(function (r, i) {
            return [i ? ", " : "", el("code", { text: r })];
          }).reduce(function (a, b) { return a.concat(b); }, []))));
        } else if (part.type && !schema.allOf) {
          section.appendChild(el("p", { class: "muted", text: "Type: " + typeOf(part) }));
        }
        return;
      }
      var rows = keys.map(function (k) {
        var p = props[k];
        var ps = resolve(p);
        var t = typeOf(p);
        var extra = [];
        if (ps.enum) extra.push("one of " + ps.enum.map(String).join(", "));
        var r = range(ps);
        if (r) extra.push(r);
        var refTarget = refName(p) || (p.items && refName(p.items));
        return [
          el("td", { class: "nowrap" }, [el("code", { text: k }), required.indexOf(k) >= 0 ? null : el("span", { class: "muted", text: " optional" })]),
          el("td", { class: "nowrap" }, [
            refTarget ? el("a", { href: "#schema-" + slug(refTarget), text: t }) : t,
            extra.length ? el("span", { class: "muted range", text: extra.join("; ") }) : null
          ]),
          el("td", null, markdown(ps.description || "", 5))
        ];
      });
      section.appendChild(dataTable(["Field", "Type", "Description"], rows));
    });
    return section;
  }

  function render() {
    var main = document.getElementById("content");
    var toc = document.getElementById("toc");
    var status = document.getElementById("status");
    if (status) status.remove();
    var info = spec.info || {};
    document.title = (info.title || "API") + " documentation";
    var version = document.getElementById("version");
    if (version) version.textContent = "v" + (info.version || "") + " · OpenAPI " + (spec.openapi || "");

    append(main, [
      el("h1", { id: "top", text: info.title || "API" }),
      info.summary ? el("p", { class: "lead", text: info.summary }) : null,
      el("section", { id: "overview" }, markdown(info.description || "", 2)),
      renderAuth()
    ]);

    var ops = operations();
    var tags = (spec.tags || []).map(function (t) { return t.name; });
    ops.forEach(function (o) {
      (o.op.tags || ["Other"]).forEach(function (t) { if (tags.indexOf(t) < 0) tags.push(t); });
    });
    var tagInfo = {};
    (spec.tags || []).forEach(function (t) { tagInfo[t.name] = t; });

    // The contents fold away on narrow screens, where they would sit
    // above the documentation.
    var tocNav = toc;
    toc = el("div", { class: "toc-body" });
    var wide = !window.matchMedia || window.matchMedia("(min-width: 960px)").matches;
    var tocBox = el("details", { class: "toc-box", open: wide }, [el("summary", { text: "Contents" }), toc]);
    tocNav.appendChild(tocBox);
    if (window.matchMedia) {
      var mq = window.matchMedia("(min-width: 960px)");
      var follow = function () { if (mq.matches) tocBox.open = true; };
      if (mq.addEventListener) mq.addEventListener("change", follow);
      else if (mq.addListener) mq.addListener(follow);
    }
    tocNav.addEventListener("click", function (e) {
      // On a narrow screen, fold the contents away once a link is chosen.
      if (e.target.closest && e.target.closest("a") && !(window.matchMedia && window.matchMedia("(min-width: 960px)").matches)) {
        tocBox.open = false;
      }
    });
    var tocList = el("ul", null, [
      el("li", null, el("a", { href: "#overview", text: "Overview" })),
      el("li", null, el("a", { href: "#authentication", text: "Authentication" }))
    ]);
    append(toc, [el("h2", { text: "Guide" }), tocList]);

    tags.forEach(function (tag) {
      var tagOps = ops.filter(function (o) { return (o.op.tags || ["Other"]).indexOf(tag) >= 0; });
      if (!tagOps.length) return;
      var section = el("section", { id: "tag-" + slug(tag) }, el("h2", { text: tag }));
      if (tagInfo[tag] && tagInfo[tag].description) section.appendChild(markdown(tagInfo[tag].description, 4));
      var list = el("ul");
      tagOps.forEach(function (o) {
        section.appendChild(renderOperation(o));
        list.appendChild(el("li", null, el("a", { href: "#" + o.id }, [
          el("span", { class: "method " + o.method, text: o.method.toUpperCase() }),
          el("span", { class: "p", text: o.path })
        ])));
      });
      main.appendChild(section);
      append(toc, [el("h2", { text: tag }), list]);
    });

    var schemas = (spec.components && spec.components.schemas) || {};
    var schemaNames = Object.keys(schemas);
    if (schemaNames.length) {
      var schemaSection = el("section", { id: "schemas" }, [
        el("h2", { text: "Schemas" }),
        el("p", null, ["Fields typed ", el("code", { text: "… | null" }), " are null when the value is not known; every other field is always present and never null, unless marked optional."])
      ]);
      var schemaList = el("ul");
      schemaNames.forEach(function (n) {
        schemaSection.appendChild(renderSchema(n, schemas[n]));
        schemaList.appendChild(el("li", null, el("a", { href: "#schema-" + slug(n) }, el("span", { class: "p", text: n }))));
      });
      main.appendChild(schemaSection);
      append(toc, [el("h2", { text: "Schemas" }), schemaList]);
    }

    if (window.location.hash.length > 1) {
      var target = document.getElementById(decodeURIComponent(window.location.hash.slice(1)));
      if (target) target.scrollIntoView();
    }
  }

  function fail(message) {
    var status = document.getElementById("status");
    var box = el("div", { class: "error", role: "alert" }, [
      el("p", { text: "The API description could not be loaded: " + message }),
      el("p", null, ["Try the raw document at ", el("a", { href: SPEC_URL, text: SPEC_URL }), "."])
    ]);
    if (status) status.replaceWith(box);
    else document.getElementById("content").appendChild(box);
  }

  function start() {
    fetch(SPEC_URL, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (res) {
        if (!res.ok) throw new Error("HTTP " + res.status);
        return res.json();
      })
      .then(function (doc) {
        spec = doc;
        try {
          render();
        } catch (e) {
          fail(e && e.message ? e.message : String(e));
        }
      })
      .catch(function (e) { fail(e && e.message ? e.message : String(e)); });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
