#!/usr/bin/env node
// kinesalite's own CLI listens on every interface; awsmp binds emulators to loopback only.
'use strict'
var argv = require('minimist')(process.argv.slice(2))
var host = argv.host || '127.0.0.1'
var server = require('kinesalite')(argv).listen(argv.port || 4567, host, function () {
  var address = server.address()
  console.log('Listening at http://%s:%s', address.address, address.port)
})
