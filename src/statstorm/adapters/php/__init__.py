"""PHP as it runs: the processes serving a site (php-fpm pools, PHP inside Apache), their
settings asked over FastCGI, the app a docroot serves, its code tree, APCu, and the pools a
long-running verb follows."""
