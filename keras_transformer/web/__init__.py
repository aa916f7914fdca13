"""The web page that ``keras_transformer.exporters.web.export_web`` copies: HTML, ES modules and the
npm ``package.json``/``package-lock.json`` of the JavaScript it vendors (package data)."""
